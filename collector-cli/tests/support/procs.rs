//! The processes of this machine as `/proc` shows them, for the tests that must find (and, when
//! a test stops half-way, end) the processes a command started: by parent, never by a process
//! group number seen earlier (pids are reused).

/// A process as `/proc/<pid>/stat` shows it.
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    pub state: char,
    pub comm: String,
    /// When it started (clock ticks after boot): with the pid, names the process even after
    /// the pid is reused.
    pub start: u64,
}

pub fn processes() -> Vec<Proc> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if rest.len() < 20 {
            continue;
        }
        v.push(Proc {
            pid,
            comm: stat[open + 1..close].to_owned(),
            state: rest[0].chars().next().unwrap_or('?'),
            ppid: rest[1].parse().unwrap_or(0),
            pgrp: rest[2].parse().unwrap_or(0),
            start: rest[19].parse().unwrap_or(0),
        });
    }
    v
}

/// The processes below `pid` (children, their children, ...), found through their parents: a
/// live process's descendants are its own, unlike a process group number seen earlier, which
/// another process may have taken since.
pub fn descendants(pid: i32) -> Vec<i32> {
    let all = processes();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(all.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
        i += 1;
    }
    found.remove(0);
    found
}
