//! What the real shim keeps about a process's end, preloaded into real programs that call the
//! real PyPI libnccl (no GPU needed): a failure survives any number of routine calls around it
//! (the report still names it first and C08 primary), and the dump header says which of
//! `exit` / `_exit` / `_Exit` the process called with which status, while the process's own exit
//! status stays what it is without the shim.

mod support;

use ncclshim_diagnose::model::ProcessModel;
use ncclshim_format::reader::{read_dump, Dump};
use ncclshim_format::{CallId, ExitVia};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::native::{nccl_fail_program, root, shim_so};

/// `cmd` with NCCL_* from the test's environment cleared (only what a test sets reaches NCCL).
fn clean(mut cmd: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NCCL") {
            cmd.env_remove(&k);
        }
    }
    cmd
}

/// Runs `cmd` bare and under the shim with dumps in `dir`: returns (bare, preloaded) outputs.
fn bare_and_preloaded(make: impl Fn() -> Command, dir: &Path) -> (Output, Output) {
    let bare = clean(make()).output().expect("spawn");
    let mut c = clean(make());
    c.env("LD_PRELOAD", shim_so()).env("NCCLSHIM_DIR", dir);
    (bare, c.output().expect("spawn"))
}

fn dumps(dir: &Path) -> Vec<Dump> {
    let mut v: Vec<Dump> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| read_dump(&e.unwrap().path()).expect("readable dump"))
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort_by_key(|d| d.header.pid);
    v
}

fn report(dir: &Path) -> Value {
    let r = ncclshim_diagnose::analyze_dir(dir, None).expect("analyze");
    support::schema::report_json(&r)
}

fn primary_catalogs(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "primary")
        .filter_map(|f| f["catalog"].as_str().map(String::from))
        .collect()
}

/// 2,000 successful routine calls before and 2,000 after a failed ncclGetUniqueId (a bad
/// NCCL_SOCKET_IFNAME): the failure, the first-event snapshots (NCCL_SOCKET_IFNAME) and the
/// version fact all stay, so the report names the failure first and C08 primary.
fn failure_survives_routine_calls(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(tmp.path());
    let dir = tmp.path().join("dumps");
    let out = clean(Command::new(&prog))
        .arg(mode)
        .env("NCCL_SOCKET_IFNAME", "nonexistent0")
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("ncclGetUniqueId rc=0"),
        "the bad interface must make it fail for real: {stdout}"
    );
    let d = &dumps(&dir)[0];
    let failed: Vec<_> = d
        .records
        .iter()
        .filter(|r| r.call() == Some(CallId::NcclGetUniqueId) && r.rc != 0)
        .collect();
    assert_eq!(failed.len(), 1, "the failed ncclGetUniqueId is kept");
    let version = d
        .records
        .iter()
        .filter(|r| r.call() == Some(CallId::NcclGetVersion) && r.rc == 0)
        .count();
    assert!(version >= 1, "a version record is kept");

    let v = report(&dir);
    let first = &v["first_failure"];
    assert_eq!(first["call"], "ncclGetUniqueId", "{first}");
    assert_eq!(first["pid"], d.header.pid);
    assert!(
        first["error_text"]
            .as_str()
            .is_some_and(|t| t.contains("no socket interface found")),
        "{first}"
    );
    assert_eq!(primary_catalogs(&v), ["C08"], "{}", v["findings"]);
    assert!(
        model(d).nccl_version.is_some_and(|n| n >= 20000),
        "the version fact survives"
    );
}

#[test]
fn a_failure_survives_thousands_of_version_calls() {
    failure_survives_routine_calls("flood");
}

/// ncclGetErrorString is not recorded at all; ncclGetVersion between them is.
#[test]
fn a_failure_survives_thousands_of_version_and_error_string_calls() {
    failure_survives_routine_calls("floodstr");
}

fn model(d: &Dump) -> ProcessModel {
    ProcessModel::from_dump(d, d.path.display().to_string())
}

/// Runs a C exit mode bare and preloaded; the exit status must be the same, and `expect`.
fn exit_mode(mode: &str, expect: i32) -> (tempfile::TempDir, PathBuf, Vec<Dump>) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(tmp.path());
    let dir = tmp.path().join("dumps");
    let (bare, shimmed) = bare_and_preloaded(
        || {
            let mut c = Command::new(&prog);
            c.arg(mode);
            c
        },
        &dir,
    );
    assert_eq!(bare.status.code(), Some(expect), "{mode} bare: {bare:?}");
    assert_eq!(
        shimmed.status.code(),
        bare.status.code(),
        "{mode}: the shim must not change the exit status: {shimmed:?}"
    );
    assert_eq!(shimmed.stdout, bare.stdout.clone(), "{mode}");
    let ds = dumps(&dir);
    (tmp, dir, ds)
}

#[test]
fn exit_status_and_function_are_in_the_header() {
    for (mode, status) in [("exit0", 0), ("exit1", 1)] {
        let (_tmp, _dir, ds) = exit_mode(mode, status);
        assert_eq!(ds.len(), 1, "{mode}");
        let e = ds[0].header.exit.expect("exit recorded");
        assert_eq!((e.via, e.status), (ExitVia::Exit, status), "{mode}");
        assert!(ds[0].header.clean_exit, "{mode}: the atexit handlers ran");
        assert!(e.t_ns >= ds[0].header.clock.monotonic_ns);
        let m = model(&ds[0]);
        assert_eq!(m.exit_status, Some(status));
        assert_eq!(m.exit_via, Some(ExitVia::Exit));
        assert!(m.clean_exit && m.exit_t.is_some() && m.exit_call_t.is_some());
    }
}

#[test]
fn underscore_exit_is_a_clean_end_with_its_status() {
    for (mode, status) in [("uexit3", 3), ("Uexit4", 4)] {
        let (_tmp, _dir, ds) = exit_mode(mode, status);
        assert_eq!(ds.len(), 1, "{mode}");
        let h = &ds[0].header;
        let e = h.exit.expect("exit recorded");
        assert_eq!(
            (e.via, e.status),
            (ExitVia::UnderscoreExit, status),
            "{mode}"
        );
        assert!(!h.clean_exit, "{mode}: _exit skips the atexit handlers");
        let m = model(&ds[0]);
        assert_eq!(m.exit_status, Some(status));
        assert_eq!(m.exit_via, Some(ExitVia::UnderscoreExit));
        assert!(
            m.clean_exit,
            "{mode}: the model counts _exit as a clean end"
        );
        assert!(m.exit_t.is_some());
    }
}

#[test]
fn a_forked_child_that_calls_underscore_exit_has_its_own_record() {
    let (_tmp, _dir, ds) = exit_mode("forkuexit3", 0);
    assert_eq!(ds.len(), 2, "parent and child each used NCCL");
    let (parent, child) = if ds[0].header.ppid == ds[1].header.pid {
        (&ds[1], &ds[0])
    } else {
        (&ds[0], &ds[1])
    };
    assert_eq!(child.header.ppid, parent.header.pid);
    let c = child.header.exit.expect("child exit");
    assert_eq!((c.via, c.status), (ExitVia::UnderscoreExit, 3));
    let p = parent.header.exit.expect("parent exit");
    assert_eq!((p.via, p.status), (ExitVia::Exit, 0));
}

/// A vfork child shares its parent's memory (and so its recorder): its `_exit(127)` after a
/// failed exec must not be written into the parent's dump.
#[test]
fn a_vfork_child_does_not_mark_its_parents_dump() {
    let (_tmp, _dir, ds) = exit_mode("vforkexec2", 2);
    assert_eq!(ds.len(), 1);
    let e = ds[0].header.exit.expect("parent exit");
    assert_eq!((e.via, e.status), (ExitVia::Exit, 2));
}

#[test]
fn a_process_that_never_used_nccl_leaves_no_dump() {
    for (mode, status) in [("noncclexit5", 5), ("nonccluexit6", 6)] {
        let (_tmp, dir, ds) = exit_mode(mode, status);
        assert!(ds.is_empty(), "{mode}: {:?}", std::fs::read_dir(dir).ok());
    }
}

/// Python: `sys.exit(n)` reaches `exit(n)`, `os._exit(n)` reaches `_exit(n)`; NCCL is loaded
/// with ctypes (RTLD_LOCAL, as torch is) and called once.
#[test]
fn python_sys_exit_and_os_exit() {
    if Command::new("python3").arg("-c").arg("1").output().is_err() {
        eprintln!("python3 not available: skipped");
        return;
    }
    let lib = root().join(".cache/nccl/cu12/lib/libnccl.so.2");
    let fetched = tempfile::tempdir().unwrap();
    nccl_fail_program(fetched.path()); // fetches the wheel
    for (ending, status, via) in [
        ("os._exit(0)", 0, ExitVia::UnderscoreExit),
        ("os._exit(9)", 9, ExitVia::UnderscoreExit),
        ("sys.exit(4)", 4, ExitVia::Exit),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dumps");
        let script = format!(
            "import ctypes, os, sys\n\
             nccl = ctypes.CDLL({lib:?})\n\
             v = ctypes.c_int(0)\n\
             assert nccl.ncclGetVersion(ctypes.byref(v)) == 0 and v.value > 0\n\
             {ending}\n",
            lib = lib.display().to_string()
        );
        let (bare, shimmed) = bare_and_preloaded(
            || {
                let mut c = Command::new("python3");
                c.arg("-c").arg(&script);
                c
            },
            &dir,
        );
        assert_eq!(bare.status.code(), Some(status), "{ending}: {bare:?}");
        assert_eq!(shimmed.status.code(), Some(status), "{ending}: {shimmed:?}");
        let ds = dumps(&dir);
        assert_eq!(ds.len(), 1, "{ending}");
        let e = ds[0].header.exit.expect("exit recorded");
        assert_eq!((e.via, e.status), (via, status), "{ending}");
    }
}
