//! A fault the program recovers from is not how it ended. The JVM, Julia, Go and `sigsetjmp`
//! probing code handle SIGSEGV themselves; a program that installs its own handler, calls NCCL
//! (so the real shim, preloaded, chains to that handler), recovers from faults and then fails
//! `ncclGetUniqueId` for real (the real PyPI libnccl, a bad NCCL_SOCKET_IFNAME) must be reported
//! for that failure (C08), not as "received SIGSEGV" with the real cause a consequence of it.
//! The program behaves the same with and without the shim.

mod support;

use ncclshim_format::reader::read_dump;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use support::native::{nccl_program, shim_so};

/// Runs `tests/c/signals.c` in `mode` bare and under the shim (dumps in `dir`), with a bad
/// interface so that `ncclGetUniqueId` fails; both must print and end the same.
fn run_both(tmp: &Path, mode: &str, dir: &Path) -> Output {
    let prog = nccl_program(tmp, "signals");
    let run = |preload: bool| {
        let mut c = Command::new(&prog);
        c.arg(mode).env("NCCL_SOCKET_IFNAME", "bad0");
        if preload {
            c.env("LD_PRELOAD", shim_so()).env("NCCLSHIM_DIR", dir);
        }
        c.output().unwrap()
    };
    let (bare, shimmed) = (run(false), run(true));
    assert_eq!(
        String::from_utf8_lossy(&shimmed.stdout),
        String::from_utf8_lossy(&bare.stdout)
    );
    assert_eq!(shimmed.status.into_raw(), bare.status.into_raw());
    assert_eq!(shimmed.status.code(), Some(1), "{shimmed:?}");
    shimmed
}

fn primary_and_signal_findings(dir: &Path) -> (Vec<String>, Vec<Value>) {
    let r = ncclshim_diagnose::analyze_dir(dir, None).unwrap();
    let v = support::schema::report_json(&r);
    let findings = v["findings"].as_array().unwrap();
    let primaries = findings
        .iter()
        .filter(|f| f["severity"] == "primary")
        .map(|f| format!("{} {}", f["catalog"], f["id"]))
        .collect();
    let signals = findings
        .iter()
        .filter(|f| f["id"] == "fatal-signal")
        .cloned()
        .collect();
    (primaries, signals)
}

fn recovered(mode: &str, faults: u32, handler_returns: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dumps");
    let out = run_both(tmp.path(), mode, &dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("recovered from {faults} fault(s)"))
            && !stdout.contains("ncclGetUniqueId rc=0"),
        "{stdout}"
    );
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let signal = read_dump(&files[0])
        .unwrap()
        .header
        .signal
        .expect("the shim saw the faults");
    assert_eq!((signal.signo, signal.count), (11, faults));
    assert_eq!(signal.handler_returns, handler_returns);
    let (primaries, signals) = primary_and_signal_findings(&dir);
    assert!(
        signals.is_empty(),
        "a recovered fault reported as a crash: {signals:?}"
    );
    assert!(
        primaries.len() == 1 && primaries[0].contains("C08"),
        "the real failure must be the primary: {primaries:?}"
    );
}

/// Three real faults, each left by `siglongjmp` from the program's own handler.
#[test]
fn faults_recovered_by_a_jump_are_not_the_root_cause() {
    recovered("recover-jump", 3, 0);
}

/// Two sent SIGSEGVs whose handler returns: the shim counts the returns.
#[test]
fn faults_whose_handler_returns_are_not_the_root_cause() {
    recovered("recover-return", 2, 2);
}

/// The contrast: a fault the program does not survive is still the crash it was.
#[test]
fn a_fault_the_program_dies_of_is_still_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_program(tmp.path(), "signals");
    let dir = tmp.path().join("dumps");
    let out = Command::new(&prog)
        .arg("segv")
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", &dir)
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(11), "{out:?}");
    let (_, signals) = primary_and_signal_findings(&dir);
    assert_eq!(signals.len(), 1, "the crash must be reported");
}
