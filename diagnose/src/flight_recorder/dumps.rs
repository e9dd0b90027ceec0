//! What the Flight Recorder dumps hold once read: each rank's dump with its process groups
//! and entries, and all of them with the files that could not be read. The bottom of the
//! Flight Recorder's files: reading, lowering and joining them all use these types.

use super::format::FrEntry;
use crate::load::Problem;
use crate::model::ProcessModel;

/// One process group as a rank's dump describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessGroup {
    /// `pg_config`'s key ("0").
    pub id: String,
    pub name: String,
    pub desc: String,
    /// Global ranks, in group-rank order.
    pub ranks: Vec<u32>,
}

impl ProcessGroup {
    /// `0:default_pg`, as PyTorch's analyzer names groups.
    pub fn label(&self) -> String {
        if self.desc.is_empty() || self.desc == "undefined" {
            self.name.clone()
        } else {
            format!("{}:{}", self.name, self.desc)
        }
    }
}

/// One rank's dump, read.
#[derive(Debug, Clone, Default)]
pub struct RankDump {
    /// The file as the report shows it.
    pub file: String,
    /// The global rank (from the file name).
    pub rank: u32,
    pub version: String,
    pub nccl_version: String,
    pub groups: Vec<ProcessGroup>,
    pub entries: Vec<FrEntry>,
    /// The dump's writer when its entries' prefix does not tell it (torchcomms); otherwise
    /// each entry's prefix does ([`super::writers::of_entry`]).
    pub writer: Option<&'static crate::knowledge::fr_writers::Writer>,
}

impl RankDump {
    /// The process group an entry belongs to (by `pg_id`, else its (name, desc) pair).
    pub fn group_of(&self, e: &FrEntry) -> Option<&ProcessGroup> {
        let by_name = e.process_group.first();
        self.groups
            .iter()
            .find(|g| by_name.is_some_and(|n| **n == *g.name))
            .or_else(|| self.groups.iter().find(|g| g.id == e.pg_id.to_string()))
    }
}

/// Every dump found, and one line per file that could not be read.
#[derive(Debug, Clone, Default)]
pub struct FlightRecorder {
    pub dumps: Vec<RankDump>,
    pub problems: Vec<Problem>,
    /// Dumps of another run found beside this run's ([`super::run_window`]): listed, never joined.
    pub other_runs: Vec<Problem>,
    /// One line per dump of a version not checked here (read best effort).
    pub notes: Vec<String>,
}

impl FlightRecorder {
    pub fn is_empty(&self) -> bool {
        self.dumps.is_empty() && self.problems.is_empty() && self.other_runs.is_empty()
    }

    /// Ranks with a readable dump, sorted.
    pub fn ranks(&self) -> Vec<u32> {
        let mut r: Vec<u32> = self.dumps.iter().map(|d| d.rank).collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// Ranks of the process groups' members with no readable dump.
    pub fn ranks_without_dump(&self) -> Vec<u32> {
        let have = self.ranks();
        let mut all: Vec<u32> = self
            .dumps
            .iter()
            .flat_map(|d| d.groups.iter().flat_map(|g| g.ranks.iter().copied()))
            .collect();
        all.sort_unstable();
        all.dedup();
        all.retain(|r| have.binary_search(r).is_err());
        all
    }
}

/// Whether a process model holds the shim's records: a shim dump, or one the scenario lab and
/// the benchmarks write with the same records (`WriterKind::Synthetic`), which must join the
/// Flight Recorder dumps as a shim's would (not be doubled by stand-ins).
pub fn has_shim_records(p: &ProcessModel) -> bool {
    p.has_shim || p.synthetic
}
