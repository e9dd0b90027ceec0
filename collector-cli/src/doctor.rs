//! The text of `ncclshim doctor`: every check with its result, worst first, then a verdict.
//! The checks themselves are the `ncclshim-doctor` crate's; this file only prints them (the
//! colours are the CLI's own dependency).

use ncclshim_doctor::{job_would_fail, Check, Status};

/// Text rendering: every check with its result, worst first (the order of the checks within
/// one status), then a one-line verdict.
pub fn render_text(checks: &[Check], color: bool) -> String {
    use owo_colors::OwoColorize;
    let mut sorted: Vec<&Check> = checks.iter().collect();
    sorted.sort_by_key(|c| std::cmp::Reverse(c.status));
    let mut s = String::new();
    for c in sorted {
        let tag = match c.status {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "WARN",
            Status::Error => "ERROR",
        };
        let tag = if !color {
            format!("[{tag:>5}]")
        } else {
            match c.status {
                Status::Ok => format!("[{:>5}]", tag.green()),
                Status::Info => format!("[{:>5}]", tag.blue()),
                Status::Warn => format!("[{:>5}]", tag.yellow()),
                Status::Error => format!("[{:>5}]", tag.red().bold()),
            }
        };
        let cat = c.catalog.map(|k| format!(" ({k})")).unwrap_or_default();
        // Messages quote this host's environment and files: shown with controls escaped.
        let safe = ncclshim_diagnose::terminal::escape_controls;
        s.push_str(&format!("{tag} {}: {}{cat}\n", c.id, safe(&c.message)));
        if c.status > Status::Ok {
            for e in &c.evidence {
                s.push_str(&format!("        {}\n", safe(e)));
            }
        }
        if let Some(r) = &c.remedy {
            if c.status >= Status::Warn {
                s.push_str(&format!("        fix: {}\n", safe(r)));
            }
        }
    }
    let count = |st: Status| checks.iter().filter(|c| c.status == st).count();
    s.push_str(&format!(
        "{} checks: {} ok, {} info, {} warning(s), {} error(s); {}\n",
        checks.len(),
        count(Status::Ok),
        count(Status::Info),
        count(Status::Warn),
        count(Status::Error),
        if job_would_fail(checks) {
            "a job started on this host would fail"
        } else {
            "nothing here stops a job"
        }
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lists_worst_first_with_evidence_and_fix_then_the_verdict() {
        let checks = [
            Check::ok("dev-shm", "/dev/shm has 65536 MiB"),
            Check::new("nccl-net", Status::Error, "NCCL_NET=IB is set")
                .evidence("NCCL_NET=IB")
                .remedy("Unset NCCL_NET")
                .catalog("C01"),
        ];
        let text = render_text(&checks, false);
        assert_eq!(
            text,
            "[ERROR] nccl-net: NCCL_NET=IB is set (C01)\n        NCCL_NET=IB\n        fix: Unset NCCL_NET\n\
             [   ok] dev-shm: /dev/shm has 65536 MiB\n\
             2 checks: 1 ok, 0 info, 0 warning(s), 1 error(s); a job started on this host would fail\n"
        );
        let healthy = render_text(&checks[..1], false);
        assert!(healthy.ends_with("nothing here stops a job\n"), "{healthy}");
    }
}
