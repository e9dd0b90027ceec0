//! How the job was configured: NCCL variables that differ across ranks (tuning or other),
//! arguments NCCL refused, and what only the failing processes have (host, version, environment,
//! limits, devices) when no rule explains the failure with high confidence.
//!
//! Catalog cases (the case is metadata, in each rule's header and in the rule table of
//! [`crate::rules::RULES`]): C26 [`env_tuning`]. Not one catalog case: [`env_diff`],
//! [`invalid_argument`], [`differential`] (reads the other rules' findings, so it runs after
//! them).

pub mod differential;
pub mod env_diff;
pub mod env_tuning;
pub mod invalid_argument;
