//! The GPU side of one host: CUDA and cuMem imports between ranks, GPUDirect RDMA, the
//! shared memory NCCL's SHM transport needs, and CUDA calls the application made itself.
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C04 [`cumem_import`], C05 [`gdr_peermem`], C07 [`dev_shm`].
//! Not one catalog case: [`app_cuda`] (a CUDA driver call the application made outside NCCL
//! failed).

pub mod app_cuda;
pub mod cumem_import;
pub mod dev_shm;
pub mod gdr_peermem;
