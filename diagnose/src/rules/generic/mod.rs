//! Checks that are not one catalog case: fatal signals, ranks that ended abruptly or never
//! arrived, uniqueId splits, hangs (stuck inside vs outside NCCL), environment and library
//! differences across ranks, connection failures judged by what the peer's address is in this
//! job, known bugs of the recorded NCCL version, ranks late to their collectives (from the profiler's
//! aggregates), and the evidence-only finding for failures no
//! rule explains.

pub mod abrupt_end;
pub mod app_cuda;
pub mod concurrent_comm;
pub mod cross_reference;
pub mod differential;
pub mod env_diff;
pub mod fatal_signal;
pub mod invalid_argument;
pub mod known_bug;
pub mod late_rank;
pub mod lib_diff;
pub mod missing_ranks;
pub mod network_path;
pub mod story_findings;
pub mod stuck;
pub mod transport_hang;
pub mod uid_split;
pub mod unknown;
pub mod waiting_ranks;
