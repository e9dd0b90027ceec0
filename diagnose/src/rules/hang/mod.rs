//! Hangs and slow ranks: which ranks are stuck inside NCCL and which outside it, what the
//! hosts say about a transport that never delivered, who merely waited after a failure, who is
//! late to every collective, and a communicator used from several threads at once.
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C25 [`concurrent_comm`]. Not one catalog case: [`stuck`] (hang
//! analysis per communicator), [`transport_hang`] (annotates a hang with every rank inside
//! NCCL), [`waiting_ranks`], [`late_rank`] (from the profiler's aggregates).

pub mod concurrent_comm;
pub mod late_rank;
pub mod stuck;
pub mod transport_hang;
pub mod waiting_ranks;
