//! Who is writing: pid, parent, process start time, boot id, hostname, clocksource. Together
//! (boot id, pid, start ticks) name a process uniquely even when pids are reused, and tell a
//! reader whether the writer may still be alive.

use std::fs;

/// Identity facts written into the header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub boot_id: String,
    pub hostname: String,
    pub clocksource: String,
    /// The run the launcher put this process in (format 2 header).
    pub run: crate::run::RunIdentity,
}

fn read_trimmed(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

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

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    crate::layout::fixed_str(&buf)
}

pub fn boot_id() -> String {
    read_trimmed("/proc/sys/kernel/random/boot_id")
}

impl ProcessIdentity {
    pub fn current() -> Self {
        // SAFETY: getpid/getppid have no preconditions and cannot fail.
        let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
        Self {
            pid,
            ppid,
            start_ticks: start_ticks_of(pid).unwrap_or(0),
            boot_id: boot_id(),
            hostname: hostname(),
            clocksource: read_trimmed(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            ),
            run: crate::run::RunIdentity::current(),
        }
    }
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
    fn this_process_is_alive() {
        let me = ProcessIdentity::current();
        assert!(me.pid > 0);
        assert!(writer_may_be_alive(&me.boot_id, me.pid, me.start_ticks));
        assert!(!writer_may_be_alive(
            &me.boot_id,
            me.pid,
            me.start_ticks + 1
        ));
    }
}
