//! Which run a process belongs to, as its launcher named it: the Slurm job and step, the
//! torchelastic run, the Open MPI / PMIx job, an LSF/PBS/Flux job. Written into every dump's
//! header at creation so that the CLI can tell apart runs that share a dump directory. A
//! process no launcher named has an empty run id; the CLI then joins it to a run by the
//! communicators it created (the uniqueId hash every rank shares) and its start time.

/// One way a launcher names a run: the source tag stored in the header, the variable holding
/// the id, an optional variable appended as `.<value>` (a Slurm step), and the variable
/// holding this process's rank within the run.
struct Launcher {
    source: &'static str,
    id: &'static str,
    sub_id: Option<&'static str>,
    rank: &'static str,
}

/// In priority order: an explicit override first, then the outermost scheduler (a torchrun
/// inside a Slurm step is named by the step, which differs between two `srun`s of one job),
/// then process launchers. Sources: Slurm `srun(1)` OUTPUT ENVIRONMENT VARIABLES; PyTorch
/// `torch.distributed.run` (TORCHELASTIC_RUN_ID, "none" when no rendezvous id was given);
/// Open MPI 4 (`OMPI_MCA_orte_ess_jobid`, `OMPI_COMM_WORLD_RANK`) and PMIx launchers such as
/// Open MPI 5 and `srun --mpi=pmix` (`PMIX_NAMESPACE`, `PMIX_RANK`); LSF `LSB_JOBID`/`LSB_JOBINDEX`;
/// PBS `PBS_JOBID`; Flux `FLUX_JOB_ID`.
const LAUNCHERS: &[Launcher] = &[
    Launcher {
        source: "ncclshim",
        id: "NCCLSHIM_RUN_ID",
        sub_id: None,
        rank: "RANK",
    },
    Launcher {
        source: "slurm",
        id: "SLURM_JOB_ID",
        sub_id: Some("SLURM_STEP_ID"),
        rank: "SLURM_PROCID",
    },
    Launcher {
        source: "lsf",
        id: "LSB_JOBID",
        sub_id: Some("LSB_JOBINDEX"),
        rank: "RANK",
    },
    Launcher {
        source: "pbs",
        id: "PBS_JOBID",
        sub_id: None,
        rank: "RANK",
    },
    Launcher {
        source: "flux",
        id: "FLUX_JOB_ID",
        sub_id: None,
        rank: "FLUX_TASK_RANK",
    },
    Launcher {
        source: "torchelastic",
        id: "TORCHELASTIC_RUN_ID",
        sub_id: None,
        rank: "RANK",
    },
    Launcher {
        source: "openmpi",
        id: "OMPI_MCA_orte_ess_jobid",
        sub_id: None,
        rank: "OMPI_COMM_WORLD_RANK",
    },
    Launcher {
        source: "pmix",
        id: "PMIX_NAMESPACE",
        sub_id: None,
        rank: "PMIX_RANK",
    },
];

/// Every variable that names a run (the ids and the sub-ids above): what a test clears so that
/// the run it starts is named by nothing it inherited (a CI job under Slurm, say).
pub fn id_variables() -> impl Iterator<Item = &'static str> {
    LAUNCHERS
        .iter()
        .flat_map(|l| std::iter::once(l.id).chain(l.sub_id))
}

/// The run a process belongs to, as far as its environment says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunIdentity {
    /// `slurm`, `torchelastic`, ... (empty: no launcher named the run).
    pub source: String,
    /// The id as the launcher gave it (`12345.0`).
    pub id: String,
    /// This process's rank according to the launcher (-1: unknown).
    pub rank: i32,
}

impl RunIdentity {
    /// Reads the identity through `var` (the environment, or a table in tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let value = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let rank = |name: &str| {
            value(name)
                .or_else(|| value("RANK"))
                .and_then(|v| v.parse::<i32>().ok())
                .unwrap_or(-1)
        };
        for l in LAUNCHERS {
            let Some(id) = value(l.id) else { continue };
            // torchrun without a rendezvous id names every run "none".
            if l.source == "torchelastic" && id.eq_ignore_ascii_case("none") {
                continue;
            }
            let id = match l.sub_id.and_then(value) {
                Some(sub) => format!("{id}.{sub}"),
                None => id,
            };
            return Self {
                source: l.source.to_owned(),
                id,
                rank: rank(l.rank),
            };
        }
        Self {
            source: String::new(),
            id: String::new(),
            rank: rank("RANK"),
        }
    }

    /// The identity of this process (reads the environment: creation time only).
    pub fn current() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(vars: &[(&str, &str)]) -> RunIdentity {
        RunIdentity::from_vars(|n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn every_id_variable_is_listed_for_the_tests_to_clear() {
        let names: Vec<&str> = id_variables().collect();
        for n in [
            "NCCLSHIM_RUN_ID",
            "SLURM_JOB_ID",
            "SLURM_STEP_ID",
            "TORCHELASTIC_RUN_ID",
        ] {
            assert!(names.contains(&n), "{n}: {names:?}");
        }
    }

    #[test]
    fn a_slurm_step_names_the_run_even_under_torchrun() {
        let r = run(&[
            ("SLURM_JOB_ID", "812"),
            ("SLURM_STEP_ID", "3"),
            ("SLURM_PROCID", "5"),
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("RANK", "7"),
        ]);
        assert_eq!(
            (r.source.as_str(), r.id.as_str(), r.rank),
            ("slurm", "812.3", 5)
        );
    }

    #[test]
    fn torchrun_without_a_rendezvous_id_does_not_name_a_run() {
        let r = run(&[("TORCHELASTIC_RUN_ID", "none"), ("RANK", "2")]);
        assert_eq!((r.source.as_str(), r.id.as_str(), r.rank), ("", "", 2));
        let r = run(&[("TORCHELASTIC_RUN_ID", "e3f1"), ("RANK", "2")]);
        assert_eq!((r.source.as_str(), r.id.as_str()), ("torchelastic", "e3f1"));
    }

    #[test]
    fn mpi_launchers_and_the_override() {
        let r = run(&[("PMIX_NAMESPACE", "prterun-h-1234@1"), ("PMIX_RANK", "1")]);
        assert_eq!(
            (r.source.as_str(), r.id.as_str(), r.rank),
            ("pmix", "prterun-h-1234@1", 1)
        );
        let r = run(&[
            ("OMPI_MCA_orte_ess_jobid", "4242"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("NCCLSHIM_RUN_ID", " mine "),
        ]);
        assert_eq!((r.source.as_str(), r.id.as_str()), ("ncclshim", "mine"));
        assert_eq!(
            run(&[]),
            RunIdentity {
                source: String::new(),
                id: String::new(),
                rank: -1
            }
        );
    }
}
