//! Operations that do not match across ranks: sends and receives that do not pair up, and
//! collectives issued differently (another operation, or in another order) on some ranks.
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C02 [`unpaired_p2p`], C19 [`desync`] (C19's size mismatches,
//! read off the job's story, are in [`crate::rules::process::story_findings`]).

pub mod desync;
pub mod unpaired_p2p;
