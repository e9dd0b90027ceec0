//! Per-process facts: who this process is and how it was started (the command line tells
//! a report which script and launcher a rank ran; secret-looking arguments are redacted).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessFacts {
    pub pid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub exe: Option<String>,
    pub cwd: Option<String>,
    pub cmdline: Vec<String>,
}

fn read_link(path: &str) -> Option<String> {
    std::fs::read_link(path)
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Splits `/proc/<pid>/cmdline` (NUL-separated, NUL-terminated) into arguments.
pub fn parse_cmdline(raw: &[u8]) -> Vec<String> {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

pub fn collect_process() -> ProcessFacts {
    ProcessFacts {
        pid: std::process::id(),
        // SAFETY: getppid and getuid have no preconditions and cannot fail.
        ppid: unsafe { libc::getppid() } as u32,
        // SAFETY: as above.
        uid: unsafe { libc::getuid() },
        exe: read_link("/proc/self/exe"),
        cwd: read_link("/proc/self/cwd"),
        // Secrets passed as arguments (`--hf-token=...`) never leave the process.
        cmdline: std::fs::read("/proc/self/cmdline")
            .map(|r| crate::redact::redact_args(&parse_cmdline(&r)))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_splits_on_nul() {
        assert_eq!(
            parse_cmdline(b"python3\0train.py\0--lr\x000.1\0"),
            ["python3", "train.py", "--lr", "0.1"]
        );
        assert!(parse_cmdline(b"").is_empty());
    }

    #[test]
    fn this_process_is_described() {
        let p = collect_process();
        assert_eq!(p.pid, std::process::id());
        assert!(!p.cmdline.is_empty());
        assert!(p.exe.is_some());
    }
}
