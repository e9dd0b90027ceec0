//! Who wrote a dump, through the real path (the real shim preloaded into real programs that call
//! the real PyPI libnccl): a live process whose name the kernel cut inside a UTF-8 character is
//! still alive to the reader, and processes of different PID namespaces that share a host name,
//! a boot, a pid and a start time (containers with `hostNetwork: true`) stay different
//! processes in the report.

mod support;

use ncclshim_format::reader::{read_dump, Dump};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use support::native::{failed_unique_id_job, nccl_fail_program, shim_so};

fn dumps(dir: &Path) -> Vec<Dump> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| read_dump(&e.unwrap().path()).expect("readable dump"))
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel keeps 15 bytes of a program's name (`comm`): "abc_" and six two-byte letters is
/// 16 bytes, so the name in `/proc/<pid>/stat` ends with the first byte of a letter.
#[test]
fn a_live_process_whose_name_is_cut_inside_a_character_is_alive() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(tmp.path());
    let odd_name = tmp.path().join("abc_мммммм");
    std::os::unix::fs::symlink(&prog, &odd_name).unwrap();
    let dir = tmp.path().join("dumps");
    let mut child = Command::new(&odd_name)
        .arg("hold")
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap() == "ready"),
        "the program never got ready"
    );
    let stat = std::fs::read(format!("/proc/{}/stat", child.id())).unwrap();
    assert!(
        std::str::from_utf8(&stat).is_err(),
        "the test needs a name cut inside a character: {}",
        String::from_utf8_lossy(&stat)
    );
    let found = dumps(&dir);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let shim = found
        .iter()
        .find(|d| d.header.pid == child.id())
        .expect("the shim's dump");
    assert_ne!(shim.header.pid_start_ticks, 0, "start ticks unread");
    assert!(
        shim.header.writer_alive,
        "a sleeping rank read as dead: {:?}",
        shim.header
    );
}

fn unshare_works() -> bool {
    Command::new("unshare")
        .args(["-pf", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Three PID namespaces on one host, two ranks in each (pids 2 and 3 in every namespace, as in
/// three containers), started together so that some share a start tick too. Each rank fails
/// `ncclGetUniqueId` for real. Six processes, not three.
#[test]
fn processes_of_different_pid_namespaces_are_not_merged() {
    if !unshare_works() {
        eprintln!("SKIP: `unshare -pf --mount-proc` is not permitted here (needs root or user namespaces)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(tmp.path());
    let mut collided = false;
    // Ranks started in the same clock tick are what merged them: try a few times for a job in
    // which two ranks share pid and start tick (the assertions hold on every attempt).
    for attempt in 0..10 {
        let dir = tmp.path().join(format!("dumps-{attempt}"));
        let one = format!(
            "unshare -pf --mount-proc sh -c '{p} uniqueid & {p} uniqueid; wait'",
            p = prog.display()
        );
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{one} & {one} & {one} & wait"))
            .env("LD_PRELOAD", shim_so())
            .env("NCCLSHIM_DIR", &dir)
            .env("NCCL_SOCKET_IFNAME", "nonexistent0")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let found = dumps(&dir);
        assert_eq!(found.len(), 6, "one dump per rank");
        let namespaces: BTreeSet<u64> = found.iter().map(|d| d.header.pid_namespace).collect();
        assert!(
            !namespaces.contains(&0) && namespaces.len() == 3,
            "each dump names its PID namespace: {namespaces:?}"
        );
        let report = ncclshim_diagnose::analyze_dir(&dir, None).unwrap();
        assert_eq!(report.job.processes, 6, "{:?}", report.job);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(
            report.failure_order.len(),
            6,
            "every rank's failure is kept"
        );
        let identities: BTreeSet<(u32, u64)> = found
            .iter()
            .map(|d| (d.header.pid, d.header.pid_start_ticks))
            .collect();
        if identities.len() < found.len() {
            collided = true;
            break;
        }
    }
    // A copy of one rank's dump beside the others (a host's folder copied twice): the same
    // identity twice, never merged silently: read apart and said.
    let dir = tmp.path().join("dumps-0");
    let copied = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::create_dir(dir.join("again")).unwrap();
    std::fs::copy(&copied, dir.join("again").join(copied.file_name().unwrap())).unwrap();
    let report = ncclshim_diagnose::analyze_dir(&dir, None).unwrap();
    assert_eq!(report.job.processes, 7, "{:?}", report.job);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        format!("{} {}", report.problems[0].file, report.problems[0].error).contains("again/")
            && report.problems[0]
                .error
                .contains("names the same process as"),
        "{:?}",
        report.problems
    );
    if !collided {
        eprintln!("note: no two ranks shared a start tick in 10 attempts (the namespaces still kept them apart)");
    }
}

/// A dump whose file name is not UTF-8 (a host name in another encoding, a copy renamed by a
/// tool) is read like any other, not skipped unseen.
#[test]
fn a_dump_whose_file_name_is_not_utf8_is_read() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let written = tmp.path().join("written");
    failed_unique_id_job(tmp.path(), &written);
    let dump = std::fs::read_dir(&written)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let dir = tmp.path().join("job");
    std::fs::create_dir(&dir).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"n\xf6de1.4242.99.shim.ncclshim");
    std::fs::copy(&dump, dir.join(odd)).unwrap();
    let report = ncclshim_diagnose::analyze_dir(&dir, None).unwrap();
    assert_eq!(
        report.job.processes, 1,
        "{:?} {:?}",
        report.job, report.problems
    );
    assert_eq!(report.job.dumps, 1);
    assert!(report.first_failure.is_some());
}
