//! The shim must never hurt a process: inert where NCCL is never called, fork-safe, and when
//! it cannot record it says so once and lets the program run exactly as it would without it.

mod common;

use common::*;
use ncclshim_dump::CallId;
use ncclshim_format::reader::read_dump;
use std::process::Command;

fn assert_inert(program: &str, args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dumps");
    let out = preloaded(std::path::Path::new(program), &dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{program} failed under the shim");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.exists(),
        "a process that never called NCCL created {}",
        dir.display()
    );
}

#[test]
fn python_startup_is_untouched() {
    assert_inert("python3", &["-c", "pass"]);
}

#[test]
fn shell_is_untouched() {
    assert_inert("sh", &["-c", "true"]);
}

#[test]
fn forked_child_gets_its_own_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir).arg("fork"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("child ncclGetVersion rc=0"), "{stdout}");
    let files = dump_files(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    let dumps: Vec<_> = files.iter().map(|f| read_dump(f).unwrap()).collect();
    let (p, c) = if dumps[1].header.ppid == dumps[0].header.pid {
        (&dumps[0], &dumps[1])
    } else {
        (&dumps[1], &dumps[0])
    };
    assert_eq!(c.header.ppid, p.header.pid, "one dump must be the child's");
    for d in [p, c] {
        assert_eq!(
            calls(d, CallId::NcclGetVersion).len(),
            1,
            "{}",
            d.path.display()
        );
        assert!(d.warnings.is_empty());
    }
    // The child's records are in its own file, not appended to the parent's.
    assert_eq!(calls(p, CallId::NcclGetVersion)[0].tid, p.header.pid);
    assert_eq!(calls(c, CallId::NcclGetVersion)[0].tid, c.header.pid);
}

#[test]
fn unwritable_dump_dir_leaves_the_program_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    // A directory below a regular file can never be created, even by root.
    let blocker = tmp.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let dir = blocker.join("dumps");
    let bare = run(Command::new(&prog).arg("init"));
    let out = run(preloaded(&prog, &dir).arg("init"));
    // Same calls, same results, same error text (the uniqueId itself is random per run).
    let strip = |o: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(o)
            .lines()
            .map(|l| l.split(" id=").next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(strip(&out.stdout), strip(&bare.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ncclshim:"))
        .collect();
    assert_eq!(ours.len(), 1, "exactly one line from the shim: {stderr}");
    assert!(ours[0].contains("recording disabled"), "{stderr}");
    assert_eq!(
        stderr.lines().count(),
        String::from_utf8_lossy(&bare.stderr).lines().count() + 1
    );
}

#[test]
fn disabled_by_env_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir)
        .arg("version")
        .env("NCCLSHIM_DISABLE", "1"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ncclGetVersion rc=0"));
    assert!(dump_files(&dir).is_empty());
}

#[test]
fn errno_survives_the_first_call_that_creates_the_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let bare = run(Command::new(&prog).arg("errno"));
    let out = run(preloaded(&prog, &dir).arg("errno"));
    let seen = field(&String::from_utf8_lossy(&out.stdout), "errno", "errno");
    assert_eq!(
        seen,
        field(&String::from_utf8_lossy(&bare.stdout), "errno", "errno")
    );
    // The shim did its most errno-prone work in that call: mkdir, open, fallocate, mmap, snapshots.
    assert_eq!(dump_files(&dir).len(), 1);
}
