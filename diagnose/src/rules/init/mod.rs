//! Communicator init: the ranks of one communicator cannot agree on who is in it or how to
//! talk to each other (versions, GPUs, rank counts, uniqueIds, ranks that never came).
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C03 [`version_mismatch`], C06 [`duplicate_gpu`], C27 [`nranks`],
//! C28 [`local_rank`]. Not one catalog case: [`uid_split`] (ranks handed different uniqueIds),
//! [`missing_ranks`] (ranks of a communicator that left no trace).

pub mod duplicate_gpu;
pub mod local_rank;
pub mod missing_ranks;
pub mod nranks;
pub mod uid_split;
pub mod version_mismatch;
