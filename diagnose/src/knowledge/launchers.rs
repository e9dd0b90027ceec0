//! Launcher variables (`knowledge/launchers.toml`): which environment variable tells a process its
//! global rank, local rank, world size, node or job under torchrun, Slurm, Open MPI, MPICH/Hydra,
//! PMIx, Horovod, Kubeflow or a plain `env://` setup. Rules ask for a role ([`lookup`]) and get the
//! value with the variable that gave it, so an evidence line can say `SLURM_LOCALID=3` when no
//! `LOCAL_RANK` was set.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// What a launcher variable tells the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    GlobalRank,
    LocalRank,
    WorldSize,
    LocalWorldSize,
    NodeRank,
    NodeCount,
    JobId,
    StepId,
    MasterAddr,
    MasterPort,
    RestartCount,
    VisibleDevices,
}

impl Role {
    /// Roles whose value is a non-negative integer.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Role::GlobalRank
                | Role::LocalRank
                | Role::WorldSize
                | Role::LocalWorldSize
                | Role::NodeRank
                | Role::NodeCount
                | Role::RestartCount
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Var {
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launcher {
    pub id: String,
    pub name: String,
    /// Variables only this launcher sets.
    pub detect: Vec<String>,
    pub source: String,
    pub vars: Vec<Var>,
    /// How programs under this launcher usually hand NCCL's uniqueId to every rank, and what
    /// keeps it from arriving (read when ranks never reached init while others wait in it).
    #[serde(default)]
    pub id_exchange: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchersFile {
    pub launcher: Vec<Launcher>,
}

pub fn launchers() -> &'static [Launcher] {
    static F: OnceLock<LaunchersFile> = OnceLock::new();
    &F.get_or_init(|| {
        super::parse(
            "launchers.toml",
            include_str!("../../knowledge/launchers.toml"),
        )
    })
    .launcher
}

/// A role's value as one variable gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value<'a> {
    pub var: &'a str,
    pub value: &'a str,
    /// The launcher whose entry named the variable.
    pub launcher: &'static str,
}

impl Value<'_> {
    /// The value as a number (numeric roles); None when it does not parse (e.g. the `-1` some
    /// launchers use for "unknown").
    pub fn number(&self) -> Option<u64> {
        self.value.trim().parse().ok()
    }

    /// `SLURM_LOCALID=3`, for evidence lines.
    pub fn shown(&self) -> String {
        format!("{}={}", self.var, self.value)
    }
}

/// The launchers whose own variables are present, innermost first.
pub fn detected(env: &BTreeMap<String, String>) -> Vec<&'static Launcher> {
    launchers()
        .iter()
        .filter(|l| l.detect.iter().any(|d| env.contains_key(d)))
        .collect()
}

/// A role's value: the first variable, in launcher order (innermost first), that is set (and,
/// for numeric roles, parses). Detected launchers are asked before the others.
pub fn lookup(env: &BTreeMap<String, String>, role: Role) -> Option<Value<'_>> {
    let det = detected(env);
    let rest = launchers()
        .iter()
        .filter(|l| !det.iter().any(|d| d.id == l.id));
    det.iter().copied().chain(rest).find_map(|l| {
        l.vars.iter().filter(|v| v.role == role).find_map(|v| {
            let (k, value) = env.get_key_value(&v.name)?;
            let usable = !role.is_numeric() || value.trim().parse::<u64>().is_ok();
            usable.then_some(Value {
                var: k.as_str(),
                value: value.as_str(),
                launcher: l.id.as_str(),
            })
        })
    })
}

/// Every value set for `role`, one per variable, whichever launcher names it (numeric roles:
/// those that parse), in launcher order. For a role several launchers can play at once: a
/// torchrun restarted inside a requeued Slurm job has two restart counts.
pub fn all(env: &BTreeMap<String, String>, role: Role) -> Vec<Value<'_>> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for l in launchers() {
        for v in l.vars.iter().filter(|v| v.role == role) {
            let Some((k, value)) = env.get_key_value(&v.name) else {
                continue;
            };
            if seen.contains(&k.as_str())
                || (role.is_numeric() && value.trim().parse::<u64>().is_err())
            {
                continue;
            }
            seen.push(k.as_str());
            out.push(Value {
                var: k.as_str(),
                value: value.as_str(),
                launcher: l.id.as_str(),
            });
        }
    }
    out
}

/// Every variable name that plays `role` in some launcher (deduplicated, in file order).
pub fn vars_for(role: Role) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for v in launchers()
        .iter()
        .flat_map(|l| &l.vars)
        .filter(|v| v.role == role)
    {
        if !out.contains(&v.name.as_str()) {
            out.push(v.name.as_str());
        }
    }
    out
}

/// Every launcher variable name.
pub fn all_vars() -> impl Iterator<Item = &'static str> {
    launchers().iter().flat_map(|l| {
        l.vars
            .iter()
            .map(|v| v.name.as_str())
            .chain(l.detect.iter().map(String::as_str))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_file_validates() {
        let mut ids = HashSet::new();
        for l in launchers() {
            assert!(ids.insert(l.id.as_str()), "duplicate launcher {}", l.id);
            assert!(
                !l.source.trim().is_empty() && !l.vars.is_empty(),
                "{}",
                l.id
            );
            let mut names = HashSet::new();
            for v in &l.vars {
                assert!(names.insert(v.name.as_str()), "{}: {} twice", l.id, v.name);
            }
        }
        for role in [
            Role::GlobalRank,
            Role::LocalRank,
            Role::WorldSize,
            Role::NodeRank,
            Role::JobId,
        ] {
            assert!(vars_for(role).len() >= 3, "{role:?}");
        }
    }

    #[test]
    fn the_innermost_launcher_wins() {
        // torchrun under srun: SLURM_PROCID is the agent's task (= node), RANK the worker's rank.
        let e = env(&[
            ("SLURM_JOB_ID", "77"),
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "0"),
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("RANK", "9"),
            ("LOCAL_RANK", "1"),
        ]);
        let r = lookup(&e, Role::GlobalRank).unwrap();
        assert_eq!(
            (r.var, r.number(), r.launcher),
            ("RANK", Some(9), "torchrun")
        );
        assert_eq!(lookup(&e, Role::LocalRank).unwrap().shown(), "LOCAL_RANK=1");
        assert_eq!(lookup(&e, Role::JobId).unwrap().value, "abc");
        // Plain srun: Slurm's variables answer.
        let e = env(&[
            ("SLURM_JOB_ID", "77"),
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
        ]);
        assert_eq!(
            lookup(&e, Role::LocalRank).unwrap().shown(),
            "SLURM_LOCALID=1"
        );
        // mpirun: Open MPI's.
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ]);
        assert_eq!(lookup(&e, Role::WorldSize).unwrap().number(), Some(4));
        // Hydra.
        let e = env(&[
            ("PMI_RANK", "2"),
            ("MPI_LOCALRANKID", "0"),
            ("PMI_SIZE", "8"),
        ]);
        assert_eq!(lookup(&e, Role::LocalRank).unwrap().var, "MPI_LOCALRANKID");
    }

    #[test]
    fn unparseable_numbers_are_skipped() {
        let e = env(&[
            ("LOCAL_RANK", "-1"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_JOB_ID", "1"),
        ]);
        assert_eq!(
            lookup(&e, Role::LocalRank).unwrap().shown(),
            "SLURM_LOCALID=2"
        );
        assert!(lookup(&env(&[("LOCAL_RANK", "x")]), Role::LocalRank).is_none());
    }

    /// The shim's environment filter must keep every variable named here, or the report never sees it.
    #[test]
    fn the_recorder_keeps_every_launcher_variable() {
        for v in all_vars() {
            assert!(
                ncclshim_host_facts::env::is_kept_name(v),
                "host-facts' environment filter drops launcher variable {v}"
            );
        }
    }
}
