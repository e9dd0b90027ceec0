//! What is installed: which libnccl (none, two), which CUDA driver for which runtime, which
//! plugins and libraries differ across ranks, and the known bugs of the recorded NCCL version.
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C18 [`driver_runtime`], C23 [`two_libnccl`], C35 [`no_libnccl`].
//! Not one catalog case: [`lib_diff`] (plugins, libnccl paths, CUDA libraries differing across
//! ranks), [`known_bug`] (the bugs and behaviour changes of the recorded version,
//! `knowledge/nccl-versions.toml`; it reads the other rules' findings, so it runs after them).

pub mod driver_runtime;
pub mod known_bug;
pub mod lib_diff;
pub mod no_libnccl;
pub mod two_libnccl;
