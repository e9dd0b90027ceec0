//! The bottom layer of the shim: the process-wide recorder and the per-thread state every
//! interposed call runs with. Nothing here names the layers above it ([`crate::nccl`],
//! [`crate::driver`], [`crate::signals`]); what they must do when a dump file is created is
//! registered here as a function pointer by `lib.rs` ([`recorder::register_setup`]), the way
//! tracing-core's dispatcher calls a subscriber it was handed, never one it knows by name.

pub mod recorder;
pub mod thread;
