//! `ncclshim doctor` as a library: checks this host before a job, with the same host-fact code
//! the shim records inside every rank (`ncclshim-host-facts`), and the thresholds and names of
//! the diagnosis (`ncclshim-diagnose`: a doctor warning and a report finding agree). Each check
//! looks for the precondition of a catalog failure (libibverbs for `NCCL_NET=IB`, peermem for
//! GPUDirect RDMA, `/dev/shm`, the locked-memory limit, `NCCL_SOCKET_IFNAME`, the installed NCCL
//! versions, suspicious `NCCL_*` settings) and says what it saw and what to change.
//!
//! Bottom up: [`check`] (one result, the verdict), [`facts`] (what is collected from this host),
//! [`host`] (the checks, one function each, pure functions of the facts), [`dumps`] (`doctor
//! DIR`: what a job's dumps say about the recorder), [`report`] (`--json`). Its own crate, not
//! `host-facts`: the checks read the diagnosis' knowledge, and `host-facts`, which the recorders
//! link, must not depend on the diagnosis. The `ncclshim` binary (collector-cli/) parses the
//! arguments and prints (the text and its colours are its own).

pub mod check;
pub mod dumps;
pub mod facts;
pub mod host;
pub mod report;

pub use check::{job_would_fail, Check, Status};
pub use dumps::dump_checks;
pub use facts::{collect, Facts, InstalledNccl};
pub use host::run_checks;
pub use report::{DoctorReport, FORMAT_VERSION};
