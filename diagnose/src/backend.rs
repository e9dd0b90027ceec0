//! Which PyTorch communication backend ran the job's process groups, when the dumps can tell:
//! PyTorch 2.15 makes `backend="nccl"` build the new `nccl2` ProcessGroup unless
//! `TORCH_DIST_USE_NCCL2=0` (or `nccl-legacy`) keeps the legacy ProcessGroupNCCL, and the two
//! differ in timeout texts, watchdog and shutdown, so the report names the one that ran.
//!
//! Evidence, best first: the Flight Recorder dumps' profiling names (`nccl2:all_reduce`: the
//! backend itself wrote it), else the recorded `TORCH_DIST_USE_NCCL2` (what `backend="nccl"`
//! builds on a PyTorch that reads it). Unset, it depends on the PyTorch release, which the
//! dumps do not hold: then nothing is said. Names and sources: `knowledge/pytorch-backends.toml`.

use crate::finding::words::rank_list;
use crate::flight_recorder::FlightRecorder;
use crate::knowledge::pytorch_backends::{by_name, by_profiling_name, selector};
use crate::model::JobModel;
use serde::Serialize;
use std::collections::BTreeMap;

/// One backend the job ran, and how that is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PytorchBackend {
    /// As PyTorch names it: `nccl2`, `nccl` (the legacy ProcessGroupNCCL), `nccl-lazy`, `ncclx`...
    pub backend: String,
    /// `flight_recorder` (profiling names) or `environment` (`TORCH_DIST_USE_NCCL2`).
    pub known_from: String,
    /// Ranks whose Flight Recorder dumps show it (empty when known from the environment).
    pub ranks: Vec<u32>,
    /// The line as the text report shows it.
    pub text: String,
}

/// The backends the job ran, as far as its dumps tell ([`PytorchBackend`]).
pub fn of_job(job: &JobModel, fr: Option<&FlightRecorder>) -> Vec<PytorchBackend> {
    let from_fr = fr.map(from_flight_recorder).unwrap_or_default();
    if !from_fr.is_empty() {
        return from_fr;
    }
    from_environment(job).into_iter().collect()
}

fn from_flight_recorder(fr: &FlightRecorder) -> Vec<PytorchBackend> {
    let mut ranks: BTreeMap<&'static str, Vec<u32>> = BTreeMap::new();
    for d in &fr.dumps {
        for e in &d.entries {
            if let Some(b) = by_profiling_name(&e.profiling_name) {
                let r = ranks.entry(b.name.as_str()).or_default();
                if r.last() != Some(&d.rank) {
                    r.push(d.rank);
                }
            }
        }
    }
    ranks
        .into_iter()
        .map(|(name, mut rs)| {
            rs.sort_unstable();
            rs.dedup();
            let b = by_name(name);
            let what = b.map(|b| b.what.as_str()).unwrap_or(name);
            let or_else = b
                .and_then(|b| b.same_prefix.as_deref())
                .map(|o| format!(", or {o}"))
                .unwrap_or_default();
            PytorchBackend {
                backend: name.to_owned(),
                known_from: "flight_recorder".to_owned(),
                text: format!(
                    "{name}: {what}{or_else} (Flight Recorder profiling names \"{name}:...\" on {} {})",
                    if rs.len() == 1 { "rank" } else { "ranks" },
                    rank_list(&rs)
                ),
                ranks: rs,
            }
        })
        .collect()
}

fn from_environment(job: &JobModel) -> Option<PytorchBackend> {
    let s = selector();
    let mut values: Vec<&str> = job
        .processes
        .iter()
        .filter_map(|p| p.env_var(&s.variable))
        .map(str::trim)
        .collect();
    values.sort_unstable();
    values.dedup();
    // Ranks that disagree leave it open (each would have to be named): say nothing.
    let [v] = values.as_slice() else {
        return None;
    };
    let name = if s.on.iter().any(|x| x == v) {
        "nccl2"
    } else if s.off.iter().any(|x| x == v) {
        "nccl"
    } else {
        return None;
    };
    let what = by_name(name).map(|b| b.what.as_str()).unwrap_or(name);
    Some(PytorchBackend {
        backend: name.to_owned(),
        known_from: "environment".to_owned(),
        ranks: Vec::new(),
        text: format!(
            "{name}: {what} ({}={v}: what backend=\"nccl\" builds on a PyTorch that reads it, from 2.14; unset, nccl2 from PyTorch {} on)",
            s.variable, s.default_from
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flight_recorder::format::FrEntry;
    use crate::flight_recorder::RankDump;
    use crate::model::ProcessModel;

    fn dump(rank: u32, names: &[&str]) -> RankDump {
        RankDump {
            rank,
            entries: names
                .iter()
                .map(|n| FrEntry {
                    profiling_name: (*n).into(),
                    ..FrEntry::default()
                })
                .collect(),
            ..RankDump::default()
        }
    }

    fn job(env: &[Option<&str>]) -> JobModel {
        JobModel::from_processes(
            env.iter()
                .enumerate()
                .map(|(i, v)| ProcessModel {
                    pid: 100 + i as u32,
                    env: Some(
                        v.map(|v| ("TORCH_DIST_USE_NCCL2".to_owned(), v.to_owned()))
                            .into_iter()
                            .collect(),
                    ),
                    ..ProcessModel::default()
                })
                .collect(),
        )
    }

    /// The profiling names decide, per backend with its ranks; the environment is not asked then.
    #[test]
    fn the_flight_recorder_names_the_backend_that_wrote_it() {
        let fr = FlightRecorder {
            dumps: vec![
                dump(0, &["nccl2:all_reduce", "gloo:barrier"]),
                dump(1, &["nccl2:all_reduce", "nccl2:send 1->0"]),
            ],
            ..FlightRecorder::default()
        };
        let b = of_job(&job(&[Some("0")]), Some(&fr));
        let names: Vec<(&str, &[u32])> = b
            .iter()
            .map(|b| (b.backend.as_str(), b.ranks.as_slice()))
            .collect();
        assert_eq!(names, [("gloo", &[0][..]), ("nccl2", &[0, 1][..])]);
        assert!(
            b[1].text.starts_with("nccl2: PyTorch's nccl2 ProcessGroup")
                && b[1]
                    .text
                    .ends_with("(Flight Recorder profiling names \"nccl2:...\" on ranks 0-1)"),
            "{b:?}"
        );
        assert_eq!(b[1].known_from, "flight_recorder");
    }

    /// Without Flight Recorder dumps, TORCH_DIST_USE_NCCL2 says what backend="nccl" built;
    /// unset, or ranks that disagree, say nothing.
    #[test]
    fn the_environment_tells_what_nccl_built_when_set() {
        let legacy = of_job(&job(&[Some("0"), Some("0")]), None);
        assert_eq!(legacy.len(), 1);
        assert_eq!(legacy[0].backend, "nccl");
        assert_eq!(legacy[0].known_from, "environment");
        assert!(
            legacy[0].text.contains("legacy ProcessGroupNCCL")
                && legacy[0].text.contains("TORCH_DIST_USE_NCCL2=0"),
            "{legacy:?}"
        );
        assert_eq!(of_job(&job(&[Some("1")]), None)[0].backend, "nccl2");
        assert!(of_job(&job(&[None, None]), None).is_empty());
        assert!(of_job(&job(&[Some("0"), Some("1")]), None).is_empty());
        // "nccl:" is also what torchcomms' nccl backend writes: said beside it.
        let fr = FlightRecorder {
            dumps: vec![dump(2, &["nccl:all_reduce"])],
            ..FlightRecorder::default()
        };
        let legacy = of_job(&job(&[None]), Some(&fr));
        assert!(
            legacy[0].text.contains("legacy ProcessGroupNCCL")
                && legacy[0].text.contains(", or torchcomms' nccl backend"),
            "{legacy:?}"
        );
        // Dumps with no name of a known backend leave the environment to decide.
        let fr = FlightRecorder {
            dumps: vec![dump(0, &["c10d:all_reduce"])],
            ..FlightRecorder::default()
        };
        assert_eq!(of_job(&job(&[Some("0")]), Some(&fr))[0].backend, "nccl");
    }
}
