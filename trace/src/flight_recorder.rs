//! PyTorch Flight Recorder dumps in the trace (issue 25): when they lie in the job directory
//! (or where `--flight-recorder PATH_PREFIX` says, as for `report`), each slice of a communicator is named by its process group (`0:default_pg`), and each
//! collective call carries the Flight Recorder entry of the same collective (its
//! `collective_seq_id`, state and the Python stack that issued it) in its args, so the user's
//! line is one click away from the call it made.
//!
//! Joined as the report joins them ([`ncclshim_diagnose::flight_recorder::join::comms_of_groups`]): a
//! process group is the communicator a rank with both dumps matched it to; a call is the entry
//! of that group whose `collective_seq_id` is the shim's `seq` + 1 (PyTorch counts from 1, the
//! shim from 0).

use ncclshim_diagnose::flight_recorder::format::FrEntry;
use ncclshim_diagnose::flight_recorder::{self, FlightRecorder, ProcessGroup, RankDump};
use ncclshim_diagnose::model::ProcessModel;
use ncclshim_format::CallId;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// The job's Flight Recorder dumps and which communicator each process group is.
#[derive(Default)]
pub struct TraceFlightRecorder {
    fr: FlightRecorder,
    /// Process group name → communicator hash.
    comm_of: BTreeMap<String, u64>,
    /// Every process group any dump names, by name.
    groups: BTreeMap<String, ProcessGroup>,
    /// Rank → its dump's index in `fr.dumps` (the first one read for that rank).
    dump_index: HashMap<u32, usize>,
}

/// A process's communicator as a process group: its label and the group's name (the key of
/// the entries that belong to it).
#[derive(Debug, Clone)]
pub struct NamedGroup {
    pub label: String,
    name: String,
}

impl NamedGroup {
    /// PyTorch's name of the group (the key of its entries).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl TraceFlightRecorder {
    /// Reads the Flight Recorder dumps `source` names (those `listing` found in `dir`, the one
    /// walk of the job directory, or a prefix of their own) and joins them with the per-file
    /// process models `parts` (before they are joined into a job). Empty when there are none.
    pub fn load(
        dir: &std::path::Path,
        source: &flight_recorder::Source,
        listing: &ncclshim_diagnose::job_dir::Listing,
        parts: &[ProcessModel],
    ) -> Self {
        let fr = flight_recorder::load(dir, source, listing);
        if fr.dumps.is_empty() {
            return Self::default();
        }
        let comm_of = flight_recorder::join::comms_of_groups(parts, &fr);
        let mut groups = BTreeMap::new();
        for g in fr.dumps.iter().flat_map(|d| &d.groups) {
            groups.entry(g.name.clone()).or_insert_with(|| g.clone());
        }
        let mut dump_index = HashMap::new();
        for (i, d) in fr.dumps.iter().enumerate() {
            dump_index.entry(d.rank).or_insert(i);
        }
        Self {
            fr,
            comm_of,
            groups,
            dump_index,
        }
    }

    fn dump_of(&self, p: &ProcessModel) -> Option<&RankDump> {
        let i = *self.dump_index.get(&p.world_rank()?)?;
        self.fr.dumps.get(i)
    }

    /// Process `p`'s communicators named by their process groups, by the communicator value
    /// its records carry (`comm`). A rank without a dump of its own (killed before its
    /// watchdog wrote one) still gets the names its communicators have in the others'.
    pub fn groups_of(&self, p: &ProcessModel) -> HashMap<u64, NamedGroup> {
        let mut out = HashMap::new();
        for g in self.groups.values() {
            let Some(&hash) = self.comm_of.get(&g.name) else {
                continue;
            };
            for m in p.memberships.iter().filter(|m| m.comm_hash == hash) {
                out.insert(
                    m.comm_ptr,
                    NamedGroup {
                        label: g.label(),
                        name: g.name.clone(),
                    },
                );
            }
        }
        out
    }

    /// Process `p`'s collectives in its dump, by (process group name, `collective_seq_id`).
    pub fn collectives_of(&self, p: &ProcessModel) -> HashMap<(&str, i64), &FrEntry> {
        let Some(d) = self.dump_of(p) else {
            return HashMap::new();
        };
        d.entries
            .iter()
            .filter(|e| !e.is_p2p)
            .filter_map(|e| Some(((d.group_of(e)?.name.as_str(), e.collective_seq_id), e)))
            .collect()
    }
}

/// Whether a shim call is a collective, numbered by the shim's per-communicator `seq` (the
/// number the Flight Recorder's `collective_seq_id` counts too). Point-to-point calls count
/// apart (`p2p_seq_id`) and are not matched.
pub fn is_numbered_collective(call: CallId) -> bool {
    matches!(
        call,
        CallId::NcclAllReduce
            | CallId::NcclBroadcast
            | CallId::NcclReduce
            | CallId::NcclAllGather
            | CallId::NcclReduceScatter
            | CallId::NcclAlltoAll
            | CallId::NcclGather
            | CallId::NcclScatter
    )
}

/// The `flight_recorder` argument of a call's slice: the entry's number, state and stack.
pub fn entry_arg(e: &FrEntry) -> Value {
    let frames: Vec<Value> = e
        .frames
        .iter()
        .map(|f| json!({"name": f.name, "filename": f.filename, "line": f.line}))
        .collect();
    json!({
        "collective_seq_id": e.collective_seq_id,
        "profiling_name": &*e.profiling_name,
        "state": &*e.state,
        "site": e.site(),
        "frames": frames,
    })
}
