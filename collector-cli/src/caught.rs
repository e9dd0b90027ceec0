//! What `ncclshim run` says when the command exits 0 although a rank recorded a failed call: a
//! program that catches NCCL's error and goes on, or a framework that falls back (another
//! backend, the CPU), succeeds while NCCL failed under it, and "the command ended" alone would
//! hide that. Two lines instead of the clean run's one: the earliest such call (which rank, the
//! call, its code and NCCL's own text), then how many other processes had one and the
//! `ncclshim report` command that explains it.
//!
//! The failed calls are those of the diagnosis' report (each process's first failure, earliest
//! first, `failure_order`), so `run` and `report` never disagree about what failed.

use ncclshim_diagnose::report::{FailureLine, Report};
use std::path::Path;

/// Each process's first failure when it is a call that returned an error, earliest first.
/// A process whose first failure is not a call (a signal, an unclean end) is not counted: a job
/// that exited 0 has no such end to tell about, and `report` does.
pub fn failed_calls(report: &Report) -> Vec<&FailureLine> {
    report
        .failure_order
        .iter()
        .filter(|f| f.call.is_some() && f.rc.is_some_and(|rc| rc != 0))
        .collect()
}

/// The notice for a command that ended with status 0 (`how`: how it ended, in words) when a
/// rank's call failed; `None` for a clean run, which keeps its one line.
pub fn notice(how: &str, report: &Report, dir: &Path) -> Option<[String; 2]> {
    let calls = failed_calls(report);
    let first = calls.first()?;
    let who = match first.rank {
        Some(r) => format!("rank {r} ({} pid {})", first.host, first.pid),
        None => format!("{} pid {}", first.host, first.pid),
    };
    let call = first.call.as_deref().unwrap_or("a call");
    let mut returned = format!("{call} returned {}", first.rc.unwrap_or_default());
    if let Some(name) = &first.rc_name {
        returned.push(' ');
        returned.push_str(name);
    }
    if let Some(text) = first.error_text.as_deref().filter(|t| !t.is_empty()) {
        returned.push_str(&format!(": \"{text}\""));
    }
    let others = match calls.len() - 1 {
        0 => String::new(),
        1 => " (and 1 other process)".to_owned(),
        n => format!(" (and {n} other processes)"),
    };
    Some([
        format!("ncclshim: {how} with status 0, but {who} had a failed call{others}: {returned}"),
        format!(
            "ncclshim: the job caught the error or fell back; what failed and why: ncclshim report {}{}",
            shell_word(&dir.display().to_string()),
            run_option(report)
        ),
    ])
}

/// ` --run ID` when the directory of `report` holds other runs than the one it is about
/// (`ncclshim report` alone would choose the most recent), else nothing.
pub fn run_option(report: &Report) -> String {
    match report.runs.iter().find(|r| r.reported) {
        Some(run) if report.runs.len() > 1 => format!(" --run {}", shell_word(&run.id)),
        _ => String::new(),
    }
}

/// `s` as one word a shell reads back unchanged: as is when it holds only characters no shell
/// treats specially, else in single quotes.
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real_capture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/real")
            .join(name)
    }

    /// A real capture of `ncclGetUniqueId` failing under a bad NCCL_SOCKET_IFNAME: the notice
    /// names the call, its code and NCCL's text, and the command to run.
    #[test]
    fn a_caught_failure_is_named_with_its_code_and_text() {
        let dir = real_capture("socket-ifname-cu12");
        let report = ncclshim_diagnose::analyze_dir(&dir, None).unwrap();
        let first = report.first_failure.as_ref().unwrap();
        let [one, two] = notice("the command ended", &report, &dir).unwrap();
        assert_eq!(
            one,
            format!(
                "ncclshim: the command ended with status 0, but {} pid {} had a failed call: \
                 ncclGetUniqueId returned 5 ncclInvalidUsage: \"Bootstrap : no socket interface found\"",
                first.host, first.pid
            )
        );
        assert!(
            two.ends_with(&format!("ncclshim report {}", dir.display())),
            "{two}"
        );
    }

    #[test]
    fn paths_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(shell_word("/tmp/a-1/dumps"), "/tmp/a-1/dumps");
        assert_eq!(shell_word("/tmp/my dumps"), "'/tmp/my dumps'");
        assert_eq!(shell_word("/tmp/it's"), r"'/tmp/it'\''s'");
    }
}
