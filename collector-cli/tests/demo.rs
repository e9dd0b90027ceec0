//! `bash scripts/demo.sh`, the README's main job, run as the README runs it: what it printed
//! must be the diagnosis of the failure it makes (the primary C08, its evidence naming the
//! interface with the typo, the remedy), and it exits 0; the same on the offline path (no
//! libnccl: the bundled real capture). A demo that no longer shows the diagnosis must fail, so
//! `.ci/run` cannot stay green while the main job stops explaining anything.
//!
//! The demo runs this build's `ncclshim` (`NCCLSHIM_DEMO_CLI`; the README's run uses the release
//! build `scripts/setup.sh` made) and keeps its dumps in a folder of the test's own
//! (`NCCLSHIM_DEMO_DIR`).

mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::native::{ensure_shim, nccl_cu12_lib, root};

/// `bash scripts/demo.sh` with `cli` as its ncclshim, the dumps under `dir`, `offline` as on a
/// machine without libnccl.
fn demo(cli: &Path, dir: &Path, offline: bool) -> Output {
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/demo.sh"))
        .env("NCCLSHIM_DEMO_CLI", cli)
        .env("NCCLSHIM_DEMO_DIR", dir)
        .env_remove("NCCLSHIM_DIR")
        .env_remove("NCCL_SOCKET_IFNAME")
        .env_remove("NO_COLOR");
    if offline {
        c.env("NCCLSHIM_DEMO_OFFLINE", "1");
    } else {
        c.env_remove("NCCLSHIM_DEMO_OFFLINE");
    }
    c.output().unwrap()
}

/// The report's diagnosis of a NCCL_SOCKET_IFNAME set to `ifname`, which matches no interface:
/// the primary, its evidence naming the setting, the remedy.
fn assert_diagnosed(stdout: &str, ifname: &str, stderr: &str) {
    let lines: Vec<&str> = stdout.lines().collect();
    let primary = lines
        .iter()
        .position(|l| l.starts_with("PRIMARY [C08]"))
        .unwrap_or_else(|| panic!("no PRIMARY [C08]:\n{stdout}\n{stderr}"));
    let block: Vec<&str> = lines[primary + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .copied()
        .collect();
    assert!(
        block.iter().any(|l| l.starts_with("    - ")
            && l.contains(&format!("NCCL_SOCKET_IFNAME={ifname}"))
            && l.contains("interfaces on")),
        "evidence naming the setting and the interfaces: {stdout}"
    );
    assert!(
        block
            .iter()
            .any(|l| l.starts_with("  remedy: ") && l.contains("NCCL_SOCKET_IFNAME")),
        "the remedy: {stdout}"
    );
}

#[test]
fn the_demo_prints_the_diagnosis_of_the_failure_it_makes() {
    ensure_shim();
    // The demo fetches it itself, quietly; fetched here, a failed download says why.
    nccl_cu12_lib();
    let tmp = tempfile::tempdir().unwrap();
    let out = demo(Path::new(env!("CARGO_BIN_EXE_ncclshim")), tmp.path(), false);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The real job ran under `run`, failed as a real program does, and `run` reported it.
    assert!(
        stderr.contains("under ncclshim run") && !stderr.contains("bundled"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ncclshim: the command failed (exit status: 1); report of"),
        "{stderr}"
    );
    assert!(stdout.contains("ncclshim report: 1 process"), "{stdout}");
    assert_diagnosed(&stdout, "eht0", &stderr);
    // The dumps stay for `ncclshim report` / `trace`.
    assert!(
        !ncclshim_diagnose::load::find_dumps(&tmp.path().join("dumps"))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn offline_the_demo_prints_the_diagnosis_of_the_bundled_capture() {
    let tmp = tempfile::tempdir().unwrap();
    let out = demo(Path::new(env!("CARGO_BIN_EXE_ncclshim")), tmp.path(), true);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("bundled real capture"), "{stderr}");
    // The capture's own setting (scripts/capture-real-fixtures.sh).
    assert_diagnosed(&stdout, "nonexistent0", &stderr);
}

/// A demo whose job no longer fails (`run` runs `true` instead) or whose report is another
/// failure's (offline: another real capture) exits non-zero and says what is missing.
#[test]
fn a_demo_that_no_longer_shows_the_diagnosis_fails() {
    ensure_shim();
    nccl_cu12_lib();
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("ncclshim");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  run) exec '{real}' run --dir \"$3\" -- true ;;\n  \
             report) exec '{real}' report '{other}' ;;\nesac\nexit 2\n",
            real = env!("CARGO_BIN_EXE_ncclshim"),
            other = root()
                .join("tests/fixtures/real/init-no-gpu-cu11")
                .display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for offline in [false, true] {
        let out = demo(&fake, tmp.path(), offline);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "offline={offline}: {stderr}");
        assert!(
            stderr.contains("demo: FAILED: the report printed lacks the primary C08"),
            "offline={offline}: {stderr}"
        );
    }
}
