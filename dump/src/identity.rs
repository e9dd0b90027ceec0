//! Who is writing: pid, parent, process start time, PID namespace, boot id, hostname,
//! clocksource. Together (boot id, PID namespace, pid, start ticks) name a process uniquely even
//! when pids are reused or containers share a host, and tell a
//! reader whether the writer may still be alive (`ncclshim_format::liveness`).

pub use ncclshim_format::liveness::{
    boot_id, parse_start_ticks, pid_namespace, start_ticks_of, writer_may_be_alive,
};
use std::fs;

/// Identity facts written into the header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    /// The inode of the PID namespace `pid` is counted in (0: unknown).
    pub pid_namespace: u64,
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

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    ncclshim_format::layout::fixed_str(&buf)
}

impl ProcessIdentity {
    pub fn current() -> Self {
        // SAFETY: getpid/getppid have no preconditions and cannot fail.
        let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
        Self {
            pid,
            ppid,
            start_ticks: start_ticks_of(pid).unwrap_or(0),
            pid_namespace: pid_namespace(),
            boot_id: boot_id(),
            hostname: hostname(),
            clocksource: read_trimmed(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            ),
            run: crate::run::RunIdentity::current(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive() {
        let me = ProcessIdentity::current();
        assert!(me.pid > 0);
        assert!(writer_may_be_alive(
            &me.boot_id,
            me.pid_namespace,
            me.pid,
            me.start_ticks
        ));
        assert!(!writer_may_be_alive(
            &me.boot_id,
            me.pid_namespace,
            me.pid,
            me.start_ticks + 1
        ));
    }
}
