//! Whether the process that wrote a dump may still be running. A writer is named by (boot id,
//! PID namespace, pid, start ticks), which stays unique when pids are reused and when containers
//! that share a host name and boot (Kubernetes `hostNetwork: true`, `docker --uts=host`) hand
//! out the same small pids; the reader compares it with the live system to tell a still-growing
//! file from a dead writer's. The writer side records the same facts with these functions
//! (`ncclshim_dump::identity`), so both read them alike.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// Field 22 (starttime) of a `/proc/<pid>/stat` line. The command name (field 2) may contain
/// spaces, parentheses and bytes that are not UTF-8 (the kernel cuts it at 15 bytes, possibly
/// inside a multi-byte character), so the line is read as bytes and fields are counted from the
/// last `)`.
pub fn parse_start_ticks(stat: &[u8]) -> Option<u64> {
    let after = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let field = after
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(19)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Start ticks of any process (a pid of the reader's PID namespace), if it exists.
pub fn start_ticks_of(pid: u32) -> Option<u64> {
    parse_start_ticks(&fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// This boot's id (empty when unreadable).
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The inode of a process's PID namespace (`/proc/<pid>/ns/pid`); 0 when unreadable (no
/// `/proc`, a kernel without namespaces, or not allowed to look).
fn pid_namespace_at(proc_entry: &str) -> u64 {
    fs::metadata(format!("{proc_entry}/ns/pid"))
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The inode of this process's PID namespace (0 when unknown). Two processes with the same pid
/// and host are the same only if this is the same too.
pub fn pid_namespace() -> u64 {
    pid_namespace_at("/proc/self")
}

/// Whether the process that wrote a dump may still be running: same boot, same process (pid
/// and start time) in its PID namespace. `pid_ns` 0 (a writer before format 2.2) is taken to be
/// the reader's namespace, as those readers did.
pub fn writer_may_be_alive(boot: &str, pid_ns: u64, pid: u32, start_ticks: u64) -> bool {
    if boot.is_empty() || boot != boot_id() {
        return false;
    }
    if pid_ns == 0 || pid_ns == pid_namespace() {
        return start_ticks_of(pid) == Some(start_ticks);
    }
    // Another namespace (a container's): its pid means nothing here. Find the process whose
    // innermost pid (`NSpid`'s last entry) in that namespace is `pid`; start ticks count from
    // boot in every namespace. Only visible from an ancestor namespace; otherwise not alive.
    foreign_pids()
        .get(&(pid_ns, pid))
        .is_some_and(|&local| start_ticks_of(local) == Some(start_ticks))
}

/// (namespace inode, innermost pid) -> pid here, for every process of another PID namespace
/// this reader can see. Built once per reader process, on the first dump from another
/// namespace: one pass over `/proc`.
fn foreign_pids() -> &'static HashMap<(u64, u32), u32> {
    static MAP: OnceLock<HashMap<(u64, u32), u32>> = OnceLock::new();
    MAP.get_or_init(|| {
        let own = pid_namespace();
        let Ok(entries) = fs::read_dir("/proc") else {
            return HashMap::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|local| {
                let entry = format!("/proc/{local}");
                let ns = pid_namespace_at(&entry);
                if ns == 0 || ns == own {
                    return None;
                }
                let status = fs::read(format!("{entry}/status")).ok()?;
                Some(((ns, innermost_pid(&status)?), local))
            })
            .collect()
    })
}

/// The last pid of the `NSpid:` line of `/proc/<pid>/status`: the pid in the process's own
/// namespace.
fn innermost_pid(status: &[u8]) -> Option<u32> {
    let line = status
        .split(|&b| b == b'\n')
        .find(|l| l.starts_with(b"NSpid:"))?;
    let text = std::str::from_utf8(&line[b"NSpid:".len()..]).ok()?;
    text.split_whitespace().last()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_survive_odd_command_names() {
        let line = b"1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20";
        assert_eq!(parse_start_ticks(line), Some(987654));
        assert_eq!(parse_start_ticks(b"garbage"), None);
    }

    #[test]
    fn a_command_name_cut_inside_a_character_is_still_read() {
        // "train_модель" cut at 15 bytes ends with the first byte of a two-byte character.
        let mut line = b"77 (train_\xd0\xbc\xd0\xbe\xd0) S ".to_vec();
        line.extend_from_slice(b"1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20");
        assert!(std::str::from_utf8(&line).is_err());
        assert_eq!(parse_start_ticks(&line), Some(4242));
    }

    #[test]
    fn a_pid_that_does_not_exist_is_not_alive() {
        assert!(!writer_may_be_alive(&boot_id(), 0, u32::MAX, 1));
        assert!(!writer_may_be_alive("", 0, std::process::id(), 1));
    }

    #[test]
    fn this_process_is_alive_in_its_own_namespace_only() {
        let me = std::process::id();
        let ticks = start_ticks_of(me).unwrap();
        let ns = pid_namespace();
        assert!(writer_may_be_alive(&boot_id(), ns, me, ticks));
        assert!(writer_may_be_alive(&boot_id(), 0, me, ticks));
        // The same pid in a namespace nobody here is in names no live process.
        assert!(!writer_may_be_alive(&boot_id(), ns ^ 1, me, ticks));
    }

    #[test]
    fn the_innermost_pid_is_the_last_of_nspid() {
        let status = b"Name:\tx\nNSpid:\t4711\t12\t3\nNSpgid:\t1\n";
        assert_eq!(innermost_pid(status), Some(3));
        assert_eq!(innermost_pid(b"Name:\tx\n"), None);
    }
}
