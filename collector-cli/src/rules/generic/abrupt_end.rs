//! A rank whose dump stops without a clean exit, with no error of its own and no fatal signal
//! recorded: it was killed (SIGKILL, OOM-killer, node failure) or crashed where the recorder
//! could not see it. When other ranks failed only after it stopped, it is the first failure.

use crate::model::{FailureWhat, JobModel};
use crate::rules::{who, Confidence, Finding, Severity};

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
        f.evidence(format!(
            "{}: the dump has no clean-exit mark and the process is gone",
            who(job, p)
        ));
        match pm.in_flight_calls().last() {
            Some((_, c)) => f.evidence(format!(
                "{}: last record: {} still in flight",
                who(job, p),
                c.name
            )),
            None => {
                if let Some(c) = pm.calls.last() {
                    f.evidence(format!(
                        "{}: last call recorded: {} (returned)",
                        who(job, p),
                        c.name
                    ));
                }
            }
        }
        if is_first && job.failures.len() > 1 {
            f.evidence("every other rank's failure comes after this rank's last record".to_owned());
        }
        out.push(f);
    }
    out
}
