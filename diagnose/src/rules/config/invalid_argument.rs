//! NCCL refused a call's arguments (ncclInvalidArgument), e.g. "AllReduce : comm argument is
//! NULL": an application bug (a communicator used after a failed init or after destroy, a null
//! buffer, a bad count or root) that NCCL names in its own text. The calls failing after it in
//! the same process (the group end, the async-error poll) are the same failure.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::model::JobModel;
use ncclshim_format::NcclResult;

pub fn check(job: &JobModel) -> Vec<Finding> {
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let Some((first, c)) = pm
            .failed_calls()
            .find(|(_, c)| c.returned(NcclResult::InvalidArgument))
        else {
            continue;
        };
        let null_comm = c
            .error_text
            .as_deref()
            .is_some_and(|t| t.contains("comm argument is NULL") || t.contains("comm is NULL"));
        let mut f = Finding::new(
            &registry::INVALID_ARGUMENT,
            // No rank in the title: the same refusal on many ranks is one finding (their ranks
            // and calls are its evidence).
            if null_comm {
                "NCCL was called with a NULL communicator".to_owned()
            } else {
                format!("NCCL rejected the arguments of {}", c.name)
            },
            if c.error_text.is_some() {
                Confidence::High
            } else {
                Confidence::Medium
            },
        )
        .remedy(if null_comm {
            "The communicator was never created (its init failed or was skipped) or was already \
             destroyed: check the return code of ncclCommInitRank / ncclCommSplit before using the \
             communicator, and the order of destroy and use."
        } else {
            "Fix the argument NCCL names in its error text (buffer, count, datatype, reduction op, \
             root/peer, stream) at this call site."
        });
        f.involve(job, p);
        f.explain(p, first);
        f.fact(Evidence::call(c).of(job, p));
        if null_comm {
            let inits = pm
                .calls
                .iter()
                .filter(|x| x.is_init() && x.t_enter < c.t_enter)
                .count();
            f.fact(
                Evidence::new(
                    EvidenceKind::Communicator,
                    format!(
                        "{inits} communicator init {} recorded before it",
                        if inits == 1 { "call" } else { "calls" }
                    ),
                )
                .value("init_calls_before", inits)
                .of(job, p),
            );
        }
        // The failures that follow in this process with the same code are its echo.
        for (i, x) in pm.failed_calls().filter(|(i, _)| *i > first) {
            if x.returned(NcclResult::InvalidArgument) {
                f.explain(p, i);
                f.fact(Evidence::call_worded(x, "then ", "").of(job, p));
            }
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_format::CallId;

    #[test]
    fn null_comm_and_its_echoes() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(23203);
            let r = &s.ranks[0];
            r.raw_call(CallId::NcclGroupStart, 0, &[1], 0, None);
            r.coll(
                CallId::NcclAllReduce,
                0,
                0,
                1024,
                7,
                0,
                0,
                4,
                Some("AllReduce : comm argument is NULL"),
            );
            r.raw_call(
                CallId::NcclGroupEnd,
                0,
                &[0],
                4,
                Some("AllReduce : comm argument is NULL"),
            );
            r.clean_exit();
        });
        let f = find(&fs, registry::INVALID_ARGUMENT.id()).expect("invalid argument");
        assert!(f.title.contains("NULL communicator"));
        assert_eq!(f.explains.len(), 2);
        assert!(find(&fs, registry::UNEXPLAINED_ERROR.id()).is_none());
    }
}
