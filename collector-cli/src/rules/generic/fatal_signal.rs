//! A fatal signal reached a rank: it crashed, and everything the other ranks report afterwards
//! is a consequence. A request to stop (SIGTERM, SIGINT, SIGHUP) is a failure only when the job
//! went on without the rank (the model decides, as for a rank that vanished); the launcher's
//! timeout stopping ranks that waited is not one.

use crate::model::{is_termination_signal, FailureWhat, JobModel};
use crate::names::signal_name;
use crate::rules::{who, Confidence, Evidence, EvidenceKind, Finding, Severity};

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let stopped_early = job.failures.iter().any(|f| {
            f.process == p && matches!(f.what, FailureWhat::Signal(s) if is_termination_signal(s))
        });
        let Some(&(signo, _)) = pm
            .signals
            .iter()
            .find(|(s, _)| !is_termination_signal(*s) || stopped_early)
        else {
            continue;
        };
        let mut f = Finding::new(
            "fatal-signal",
            None,
            format!("{} received {}", who(job, p), signal_name(signo)),
            Severity::Primary,
            Confidence::High,
        )
        .remedy("Read this rank's stderr and core dump / dmesg for the crashing frame; the errors of other ranks follow from it.");
        f.involve(job, p);
        f.fact(
            Evidence::new(
                EvidenceKind::Lifecycle,
                format!("fatal signal {signo} ({})", signal_name(signo)),
            )
            .value("signal", signo)
            .value("signal_name", signal_name(signo))
            .of(job, p),
        );
        if let Some((_, c)) = pm.in_flight_calls().last() {
            f.fact(
                Evidence::new(
                    EvidenceKind::Lifecycle,
                    format!("inside {} when it happened", c.name),
                )
                .value("call", c.name.as_ref())
                .of(job, p),
            );
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::rules::testutil::{analyze, find};

    #[test]
    fn segfault_is_primary() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22005);
            s.init_world(22005);
            s.ranks[0].fatal_signal(11);
        });
        let f = find(&fs, "fatal-signal").expect("signal");
        assert!(f.title.contains("SIGSEGV"));
    }
}
