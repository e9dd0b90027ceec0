//! Whether the process that wrote a dump may still be running. A writer is named by (boot id,
//! pid, start ticks), which stays unique when pids are reused; the reader compares it with the
//! live system to tell a still-growing file from a dead writer's. The writer side records the
//! same three facts with these functions (`ncclshim_dump::identity`), so both read them alike.

use std::fs;

/// Field 22 (starttime) of a `/proc/<pid>/stat` line. The command name (field 2) may contain
/// spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Start ticks of any process, if it exists.
pub fn start_ticks_of(pid: u32) -> Option<u64> {
    parse_start_ticks(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This boot's id (empty when unreadable).
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Whether the process that wrote a dump may still be running: same boot, same pid, same start.
pub fn writer_may_be_alive(boot: &str, pid: u32, start_ticks: u64) -> bool {
    if boot.is_empty() || boot != boot_id() {
        return false;
    }
    start_ticks_of(pid) == Some(start_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_survive_odd_command_names() {
        let line = "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20";
        assert_eq!(parse_start_ticks(line), Some(987654));
        assert_eq!(parse_start_ticks("garbage"), None);
    }

    #[test]
    fn a_pid_that_does_not_exist_is_not_alive() {
        assert!(!writer_may_be_alive(&boot_id(), u32::MAX, 1));
        assert!(!writer_may_be_alive("", std::process::id(), 1));
    }
}
