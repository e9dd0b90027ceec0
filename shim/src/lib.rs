//! `libncclshim.so`: loaded with `LD_PRELOAD`, it interposes NCCL's API ([`nccl`]) and the CUDA
//! driver's IPC / cuMem calls that NCCL reaches through function pointers ([`driver`]), and
//! records every call into a crash-safe dump ([`recorder`]). It also interposes `exit`,
//! `_exit` and `_Exit` ([`exit`]) so that a dump says how its process ended, and with which status.
//!
//! The shim is inert until the first NCCL (or watched driver) event: no file, no thread, no
//! signal handler (the fatal-signal handlers of [`signals`] are chained in at that event). It never changes what NCCL or the driver return.

pub mod driver;
pub mod exit;
pub mod nccl;
pub mod recorder;
pub mod signals;
