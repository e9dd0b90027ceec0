//! `ncclshim run` end to end: the real `libncclshim.so` preloaded into a real NCCL program (the
//! PyPI wheel's libnccl, fetched by `scripts/fetch-nccl.sh`), the dump directory set, the
//! command's exit code passed through, and the report printed when the command fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The shim must sit next to the ncclshim binary (or in its deps/): build it when this test runs
/// alone (`cargo test -p collector-cli`); under `cargo test --workspace` it is already built.
fn ensure_shim() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ncclshim"));
    let dir = bin.parent().unwrap();
    if !dir.join("libncclshim.so").exists() && !dir.join("deps/libncclshim.so").exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "ncclshim-shim"])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(st.success());
    }
}

fn nccl_program(out: &Path) -> PathBuf {
    let st = Command::new("bash")
        .arg(root().join("scripts/fetch-nccl.sh"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let lib = root().join(".cache/nccl/cu12/lib");
    let prog = out.join("nccl_fail");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&prog)
        .arg(root().join("tests/c/nccl_fail.c"))
        .arg(format!("-I{}", root().join("tests/c").display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-l:libnccl.so.2")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .unwrap();
    assert!(st.success());
    prog
}

#[test]
fn the_exit_code_of_the_command_is_kept() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(dir.path().join("dumps"))
        .args(["--", "sh", "-c", "echo $LD_PRELOAD; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.trim().ends_with("libncclshim.so"),
        "absolute preload path: {stdout}"
    );
    assert!(Path::new(stdout.trim()).is_absolute());
    assert!(dir.path().join("dumps").is_dir());
    // sh never touched NCCL: no dump was written, and the report says there is nothing to read.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wrote no dump"), "{stderr}");
}

#[test]
fn a_failing_nccl_job_is_recorded_and_reported() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let prog = nccl_program(dir.path());
    let dumps = dir.path().join("dumps");
    let script = format!("{} uniqueid; exit 1", prog.display());
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .args(["--", "sh", "-c", &script])
        .env("NCCL_SOCKET_IFNAME", "nonexistent0")
        .env_remove("NCCLSHIM_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[C08]"),
        "report printed after the failure: {stdout}"
    );
    assert!(stdout.contains("no socket interface found"), "{stdout}");
    let n = std::fs::read_dir(&dumps).unwrap().count();
    assert!(n >= 1, "the shim wrote its dump into --dir");
}
