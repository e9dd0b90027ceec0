//! The network between ranks: a network NCCL cannot initialise, an interface filter that
//! matches nothing, connections judged by what the peer's address is in this job, and the
//! remote errors survivors report when a peer died.
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C01 [`net_ib`], C08 [`socket_ifname`], C09 and C10
//! [`network_path`], C20 [`dead_peer`].

pub mod dead_peer;
pub mod net_ib;
pub mod network_path;
pub mod socket_ifname;
