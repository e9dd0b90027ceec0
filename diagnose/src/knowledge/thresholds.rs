//! Thresholds `doctor` and `report` share (`knowledge/thresholds.toml`): what "small /dev/shm" or
//! "a finite memlock limit" means exists once, with its reason.

use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevShm {
    /// Below this size /dev/shm is too small for NCCL's SHM transport.
    pub min_bytes: u64,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memlock {
    /// Any finite RLIMIT_MEMLOCK is a risk for ibverbs.
    pub require_unlimited: bool,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LargeScale {
    pub min_ranks: u32,
    pub source: String,
}

/// When a rank counts as late to a communicator's collectives (`rules::hang::late_rank`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateRank {
    /// Its mean GPU time per operation is at most this fraction of its peers' median...
    pub max_ratio: f64,
    /// ...and the peers' median exceeds it by at least this many ns per operation...
    pub min_wait_ns: u64,
    /// ...over at least this many operations whose kernel ended, on every rank.
    pub min_ops: u64,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    pub dev_shm: DevShm,
    pub memlock: Memlock,
    pub large_scale: LargeScale,
    pub late_rank: LateRank,
}

pub fn thresholds() -> &'static Thresholds {
    static F: OnceLock<Thresholds> = OnceLock::new();
    F.get_or_init(|| {
        super::parse(
            "thresholds.toml",
            include_str!("../../knowledge/thresholds.toml"),
        )
    })
}

/// Whether a /dev/shm of `bytes` is too small for NCCL.
pub fn dev_shm_too_small(bytes: u64) -> bool {
    bytes < thresholds().dev_shm.min_bytes
}

/// Whether a locked-memory limit is a risk for ibverbs (`unlimited`, else the soft limit).
pub fn memlock_too_low(unlimited: bool, soft_bytes: Option<u64>) -> bool {
    thresholds().memlock.require_unlimited && !unlimited && soft_bytes.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_validates() {
        let t = thresholds();
        assert!(t.dev_shm.min_bytes >= 64 << 20);
        for s in [
            &t.dev_shm.source,
            &t.memlock.source,
            &t.large_scale.source,
            &t.late_rank.source,
        ] {
            assert!(s.contains("NVIDIA/nccl"), "{s}");
        }
        assert!(t.large_scale.min_ranks > 1);
        assert!(t.late_rank.max_ratio > 0.0 && t.late_rank.max_ratio < 1.0);
        assert!(t.late_rank.min_ops > 0);
    }

    #[test]
    fn dockers_default_is_small_and_a_gibibyte_is_not() {
        assert!(dev_shm_too_small(64 << 20));
        assert!(!dev_shm_too_small(1 << 30));
        assert!(memlock_too_low(false, Some(64 << 10)));
        assert!(!memlock_too_low(true, None));
    }
}
