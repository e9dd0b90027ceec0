//! Symbol lookup, the layer just above the runtime: the exported `dlsym` trampoline and the real
//! `dlsym` behind it ([`dlsym`]). It dispatches the names it is asked about to the deciders the
//! layers above hand it (`crate::driver` for `cu*`, `crate::nccl` for `nc*`) and names neither.
//!
//! x86_64 Linux only (the trampoline is x86_64 assembly).

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod dlsym;
