//! How NCCL's profiler interface numbers its events and what it never reports
//! (`knowledge/profiler.toml`), per NCCL release and profiler ABI version.
//!
//! The readers of profiler events (the desync rule, the stuck-operation rule) must compare ranks
//! within the scope NCCL numbers in, and must not read a missing GPU end or a missing event as a
//! hang where NCCL never reports one. Those facts differ per release, so they live here as data
//! with their sources rather than as assumptions in each rule.

use super::bugs::NcclVersion;
use serde::Deserialize;
use std::sync::OnceLock;

/// What a profiler sequence number counts within.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeqScope {
    /// The event carries no sequence number.
    None,
    /// One counter per communicator.
    Communicator,
    /// One counter per communicator and collective function (`comm->seqNumber[func]`).
    CommunicatorFunction,
    /// One counter per communicator for its copy-engine collectives only.
    CommunicatorCe,
}

/// One era of the interface: NCCL releases sharing one profiler ABI.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Era {
    pub id: String,
    pub abi: u32,
    pub introduced: String,
    pub until: Option<String>,
    pub coll_seq: SeqScope,
    pub p2p_seq: SeqScope,
    pub ce_coll_seq: SeqScope,
    pub source: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventFamily {
    Coll,
    P2p,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Situation {
    /// A P2p whose peer is the rank itself.
    SelfPeer,
    /// Any operation of a communicator of one rank.
    OneRankCommunicator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Missing {
    /// The event starts and stops, but no kernel-channel event reports its GPU end.
    GpuEnd,
    /// No event at all.
    Events,
}

/// Events NCCL never emits, or never ends, in one situation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlindSpot {
    pub id: String,
    pub events: EventFamily,
    pub situation: Situation,
    pub missing: Missing,
    pub introduced: String,
    pub until: Option<String>,
    pub source: String,
    pub measured: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilerFacts {
    /// The era assumed when neither the NCCL version nor the ABI version is known.
    pub default_era: String,
    pub numbering: Vec<Era>,
    pub blind_spot: Vec<BlindSpot>,
}

pub fn facts() -> &'static ProfilerFacts {
    static F: OnceLock<ProfilerFacts> = OnceLock::new();
    F.get_or_init(|| {
        super::parse(
            "profiler.toml",
            include_str!("../../knowledge/profiler.toml"),
        )
    })
}

fn version(s: &str) -> NcclVersion {
    // Validated by the tests: every version in the file parses.
    NcclVersion::parse(s).unwrap_or(NcclVersion {
        major: 0,
        minor: 0,
        patch: 0,
    })
}

fn in_range(v: NcclVersion, introduced: &str, until: Option<&str>) -> bool {
    version(introduced) <= v && until.is_none_or(|u| v < version(u))
}

/// The era a process's events belong to: by the profiler ABI its plugin was loaded as when
/// recorded (what NCCL actually called), else by its NCCL version, else the default.
pub fn era(nccl: Option<NcclVersion>, abi: Option<u32>) -> &'static Era {
    let f = facts();
    abi.and_then(|a| f.numbering.iter().find(|e| e.abi == a))
        .or_else(|| {
            nccl.and_then(|v| {
                f.numbering
                    .iter()
                    .find(|e| in_range(v, &e.introduced, e.until.as_deref()))
            })
        })
        .or_else(|| f.numbering.iter().find(|e| e.id == f.default_era))
        .expect("profiler.toml: default_era names an era (checked by the tests)")
}

/// Whether NCCL `nccl` (unknown: assume it does) has the blind spot `id`.
pub fn has_blind_spot(id: &str, nccl: Option<NcclVersion>) -> bool {
    facts()
        .blind_spot
        .iter()
        .find(|b| b.id == id)
        .is_some_and(|b| nccl.is_none_or(|v| in_range(v, &b.introduced, b.until.as_deref())))
}

/// A P2p to the rank itself never reports a GPU end (no proxy op, so no kernel-channel event).
pub const SELF_P2P_NO_GPU_END: &str = "self-p2p-no-gpu-end";
/// A communicator of one rank emits no profiler events.
pub const ONE_RANK_NO_EVENTS: &str = "one-rank-no-events";

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Option<NcclVersion> {
        NcclVersion::parse(s)
    }

    #[test]
    fn the_file_validates() {
        let f = facts();
        assert!(f.numbering.iter().any(|e| e.id == f.default_era));
        for e in &f.numbering {
            assert!(NcclVersion::parse(&e.introduced).is_some(), "{}", e.id);
            assert!(e
                .until
                .as_deref()
                .is_none_or(|u| NcclVersion::parse(u).is_some()));
            assert!(
                e.source.contains("NVIDIA/nccl"),
                "{} names its source",
                e.id
            );
        }
        for b in &f.blind_spot {
            assert!(NcclVersion::parse(&b.introduced).is_some(), "{}", b.id);
            assert!(
                b.source.contains("NVIDIA/nccl"),
                "{} names its source",
                b.id
            );
        }
        for id in [SELF_P2P_NO_GPU_END, ONE_RANK_NO_EVENTS] {
            assert!(
                f.blind_spot.iter().any(|b| b.id == id),
                "{id} is in the file"
            );
        }
    }

    #[test]
    fn eras_are_contiguous_and_ordered() {
        let eras = &facts().numbering;
        for w in eras.windows(2) {
            assert_eq!(w[0].until.as_deref(), Some(w[1].introduced.as_str()));
            assert!(w[0].abi < w[1].abi);
        }
        assert!(eras.last().unwrap().until.is_none());
    }

    #[test]
    fn nccl_2_28_numbers_colls_per_function_and_p2p_not_at_all() {
        let e = era(v("2.28.9"), None);
        assert_eq!(e.abi, 5);
        assert_eq!(e.coll_seq, SeqScope::CommunicatorFunction);
        assert_eq!(e.p2p_seq, SeqScope::None);
        // The ABI the plugin was loaded as wins over the version.
        assert_eq!(era(v("2.28.9"), Some(6)).abi, 6);
        assert_eq!(era(v("2.23.4"), None).abi, 1);
        assert_eq!(era(v("2.30.7"), None).ce_coll_seq, SeqScope::CommunicatorCe);
        assert_eq!(era(None, None).id, facts().default_era);
    }

    #[test]
    fn blind_spots_by_version() {
        assert!(has_blind_spot(SELF_P2P_NO_GPU_END, v("2.28.9")));
        assert!(has_blind_spot(SELF_P2P_NO_GPU_END, None));
        // Before profiler v3 (2.26.2) there were no kernel-channel events at all.
        assert!(!has_blind_spot(SELF_P2P_NO_GPU_END, v("2.25.1")));
        assert!(has_blind_spot(ONE_RANK_NO_EVENTS, v("2.23.4")));
        assert!(!has_blind_spot("no-such-entry", v("2.28.9")));
    }
}
