//! Facts about the host, the process, its environment and its loaded libraries, collected the
//! same way by the shim (inside a training process, at its first NCCL event) and by
//! `ncclshim doctor` (before a job runs), so a report and a pre-flight check compare like
//! with like.
//!
//! Everything here reads files, `/proc`, `/sys`, libc queries and the loader's list of mapped
//! objects. Nothing spawns a process, opens a network connection, or initializes CUDA: a
//! library's version is asked for only through a handle the caller allows (`VersionProbe`).
//! Each fact is best-effort: a missing file becomes `None`/`false`, never an error.

pub mod env;
pub mod host;
pub mod libs;
pub mod process;
pub mod redact;

pub use env::{environment, is_secret_name, redact_args, Environment, REDACTED};
pub use host::{
    collect_host_facts, ContainerHints, DriverGpu, HostFacts, IbGid, IbPort, NetIf, PathFact,
};
pub use libs::{
    classify, collect_libraries, EmbeddedNccl, LibKind, Libraries, LoadedLibrary, VersionProbe,
    EMBEDDED_NCCL_SYMBOLS,
};
pub use process::{collect_process, ProcessFacts};
