//! Who writes PyTorch Flight Recorder dumps and what one entry became in NCCL under each
//! writer (`knowledge/flight-recorder-writers.toml`). The legacy ProcessGroupNCCL issues one NCCL
//! call per entry, numbered like it; PyTorch 2.15's `nccl2` and `nccl-lazy` (c10d's
//! FlightRecorderHook) and torchcomms do not, and the join must know how, from data with its
//! source in PyTorch, not from code.

use ncclshim_format::CallId;
use serde::Deserialize;
use std::sync::OnceLock;

/// One writer of Flight Recorder entries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Writer {
    pub id: String,
    /// The profiling name's part before ':' ("nccl2" in "nccl2:all_reduce").
    pub prefix: String,
    /// How a writer that shares another's prefix is told apart ("bare_ranks": `pg_config`
    /// ranks written "0,1", without brackets).
    #[serde(default)]
    pub detect: Option<String>,
    pub what: String,
    /// Whether an entry can be "started" (else it is scheduled until completed).
    pub records_started: bool,
    /// Operations that take a collective sequence number and issue no NCCL collective.
    pub seq_counts_non_nccl: Vec<String>,
    /// False where send/recv entries can be missing from a dump.
    pub p2p_entries_complete: bool,
    /// Point-to-point runs on one 2-rank communicator per peer pair.
    pub pair_communicators: bool,
    /// One collective_seq_id over every group of the process.
    pub seq_per_process: bool,
    /// Whether `pg_config` lists global ranks (else the communicator's own).
    pub global_ranks: bool,
    pub source: String,
}

/// How many times a lowering's calls are issued for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Repeat {
    Once,
    PerOutput,
    PerInput,
    PerRank,
}

/// The element count of each call of a lowering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Count {
    Input,
    OutputEach,
    InputEach,
    InputPerRank,
    One,
}

/// The NCCL calls one entry of `op` became under `writers`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lowering {
    pub writers: Vec<String>,
    pub op: String,
    /// NCCL function names, in order (empty: no NCCL collective at all).
    pub calls: Vec<String>,
    pub repeat: Repeat,
    pub count: Count,
    pub source: String,
}

impl Lowering {
    /// [`Self::calls`] as call ids (every name is one: the tests check it).
    pub fn call_ids(&self) -> Vec<CallId> {
        self.calls.iter().filter_map(|n| call_named(n)).collect()
    }
}

/// The call id of an NCCL function's name.
pub fn call_named(name: &str) -> Option<CallId> {
    CallId::ALL.iter().copied().find(|c| c.name() == name)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WritersFile {
    writer: Vec<Writer>,
    lowering: Vec<Lowering>,
}

fn file() -> &'static WritersFile {
    static F: OnceLock<WritersFile> = OnceLock::new();
    F.get_or_init(|| {
        super::parse(
            "flight-recorder-writers.toml",
            include_str!("../../knowledge/flight-recorder-writers.toml"),
        )
    })
}

pub fn writers() -> &'static [Writer] {
    &file().writer
}

pub fn lowerings() -> &'static [Lowering] {
    &file().lowering
}

/// The writer of id `id`.
pub fn writer(id: &str) -> Option<&'static Writer> {
    writers().iter().find(|w| w.id == id)
}

/// The writer a profiling-name prefix names, among those told apart by their prefix alone.
pub fn by_prefix(prefix: &str) -> Option<&'static Writer> {
    writers()
        .iter()
        .find(|w| w.detect.is_none() && w.prefix == prefix)
}

/// The lowering of `op` under writer `writer_id`, if the writer lowers it its own way.
pub fn lowering(writer_id: &str, op: &str) -> Option<&'static Lowering> {
    lowerings()
        .iter()
        .find(|l| l.op == op && l.writers.iter().any(|w| w == writer_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writer_and_lowering_has_a_source_and_known_names() {
        assert!(writers().len() >= 5);
        for w in writers() {
            assert!(
                w.source.contains("pytorch/pytorch") || w.source.contains("torchcomms"),
                "{w:?}"
            );
        }
        for l in lowerings() {
            assert_eq!(
                l.call_ids().len(),
                l.calls.len(),
                "unknown NCCL name: {l:?}"
            );
            assert!(l.source.contains("pytorch/pytorch"), "{l:?}");
            for w in &l.writers {
                assert!(writer(w).is_some(), "{l:?} names no writer {w}");
            }
        }
    }

    #[test]
    fn nccl2_lowers_broadcast_to_bcast_and_counts_split() {
        let b = lowering("nccl2", "broadcast").expect("broadcast");
        assert_eq!(b.call_ids(), [CallId::NcclBcast]);
        assert!(lowering("nccl", "broadcast").is_none(), "legacy: one call");
        assert!(lowering("nccl2", "split").expect("split").calls.is_empty());
        assert_eq!(by_prefix("nccl2").map(|w| w.id.as_str()), Some("nccl2"));
        assert_eq!(by_prefix("nccl").map(|w| w.id.as_str()), Some("nccl"));
        assert!(!writer("nccl-lazy").expect("lazy").p2p_entries_complete);
    }
}
