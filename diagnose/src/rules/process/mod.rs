//! How each process ended, read from the job's story: a fatal signal, a rank that stopped
//! without a clean exit, a rank that left while its peers still waited for it; and one
//! operation issued with different arguments (also read off the story).
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C19's size mismatches in [`story_findings`]. Not one catalog case:
//! [`fatal_signal`], [`abrupt_end`], the rank that left early ([`story_findings`]).

pub mod abrupt_end;
pub mod fatal_signal;
pub mod story_findings;
