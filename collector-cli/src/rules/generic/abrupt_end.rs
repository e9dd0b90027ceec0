//! A rank whose dump stops without a clean exit, with no error of its own and no fatal signal
//! recorded: it was killed (SIGKILL, OOM-killer, node failure) or crashed where the recorder
//! could not see it. When other ranks failed only after it stopped, it is the first failure.

use crate::model::{FailureWhat, JobModel};
use crate::rules::{who, Confidence, Evidence, EvidenceKind, Finding, Severity};

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    let first = job.failures.first().map(|f| f.process);
    for fl in job.failures.iter().filter(|f| f.what == FailureWhat::Died) {
        let p = fl.process;
        let pm = &job.processes[p];
        let is_first = first == Some(p);
        let mut f = Finding::new(
            "rank-ended-abruptly",
            None,
            format!("{} stopped without a clean exit and without an error of its own", who(job, p)),
            if is_first { Severity::Primary } else { Severity::Contributing },
            Confidence::Medium,
        )
        .remedy(
            "Check how this process ended: the launcher's exit status, dmesg / OOM-killer messages \
             (`dmesg -T | grep -i -e oom -e killed`), the node's health, its stderr.",
        );
        f.involve(job, p);
        f.fact(
            Evidence::new(
                EvidenceKind::Lifecycle,
                "the dump has no clean-exit mark and the process is gone",
            )
            .value("clean_exit", false)
            .value("alive", false)
            .of(job, p),
        );
        match pm.in_flight_calls().last() {
            Some((_, c)) => f.fact(
                Evidence::new(
                    EvidenceKind::Lifecycle,
                    format!("last record: {} still in flight", c.name),
                )
                .value("last_call", c.name.as_ref())
                .value("in_flight", true)
                .of(job, p),
            ),
            None => {
                if let Some(c) = pm.calls.last() {
                    f.fact(
                        Evidence::new(
                            EvidenceKind::Lifecycle,
                            format!("last call recorded: {} (returned)", c.name),
                        )
                        .value("last_call", c.name.as_ref())
                        .value("in_flight", false)
                        .of(job, p),
                    );
                }
            }
        }
        if is_first && job.failures.len() > 1 {
            f.fact(Evidence::new(
                EvidenceKind::Inference,
                "every other rank's failure comes after this rank's last record",
            ));
        }
        out.push(f);
    }
    out
}
