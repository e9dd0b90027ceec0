//! NVIDIA's own Python binding of NCCL, nccl4py (PyPI), works the same under the preloaded shim
//! (issue 35): it loads libnccl itself (through cuda-pathfinder, by name on the library path),
//! then calls it through the handle it got. Bare and preloaded, the program prints the same
//! version, gets a unique id and sees the same real `ncclCommInitRank` failure (no GPU here:
//! NCCL's own "unhandled cuda error"); under the shim each call is recorded with NCCL's return
//! code and its own error text. nccl4py and what it imports are pinned with hashes in
//! scripts/test-requirements.txt and installed into the project's venv by
//! `scripts/tools-venv.sh --test`.

mod common;

use common::*;
use ncclshim_format::CallId;
use std::path::PathBuf;
use std::process::Command;

/// The project's venv's python with nccl4py installed (installed on first use).
fn python_with_nccl4py() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/tools-venv.sh"))
        .arg("--test")
        .output()
        .expect("bash scripts/tools-venv.sh --test");
    assert!(
        out.status.success(),
        "scripts/tools-venv.sh --test failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let venv = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("the venv's directory")
        .trim()
        .to_string();
    PathBuf::from(venv).join("bin/python")
}

const PROGRAM: &str = "\
from nccl.bindings import nccl
print('version', nccl.get_version())
uid = nccl.get_unique_id()
print('unique id', type(uid).__name__)
try:
    nccl.comm_init_rank(1, uid.ptr, 0)
    print('init ok')
except nccl.NCCLError as e:
    print('init failed:', e)
";

#[test]
fn nccl4py_calls_through_the_shim_as_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let python = python_with_nccl4py();
    let script = tmp.path().join("nccl4py_job.py");
    std::fs::write(&script, PROGRAM).unwrap();
    let lib_dir = nccl_lib_dir(Wheel::Cu12);
    // nccl4py finds libnccl.so.2 by name, as on a machine where the nvidia-nccl wheel's
    // directory is on the library path.
    let bare = run(Command::new(&python)
        .arg(&script)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env_remove("LD_PRELOAD"));
    let dir = tmp.path().join("dumps");
    let shimmed = run(preloaded(&python, &dir)
        .arg(&script)
        .env("LD_LIBRARY_PATH", &lib_dir));
    let bare_out = String::from_utf8_lossy(&bare.stdout).into_owned();
    let shimmed_out = String::from_utf8_lossy(&shimmed.stdout).into_owned();
    let version = version_code(&wheel_version(Wheel::Cu12));
    assert!(
        bare_out.contains(&format!("version {version}")),
        "{bare_out}"
    );
    assert!(bare_out.contains("unique id"), "{bare_out}");
    assert!(bare_out.contains("init failed:"), "{bare_out}");
    assert_eq!(shimmed_out, bare_out);

    let d = single_dump(&dir);
    let version_calls = calls(&d, CallId::NcclGetVersion);
    assert_eq!(version_calls.len(), 1);
    assert_eq!(version_calls[0].args[0], version as u64);
    assert_eq!(calls(&d, CallId::NcclGetUniqueId).len(), 1);
    let init = calls(&d, CallId::NcclCommInitRank);
    assert_eq!(init.len(), 1);
    assert_ne!(init[0].rc, 0, "NCCL's init fails without a GPU");
    let text = error_text(&d, init[0]).expect("NCCL's own error text recorded");
    assert!(text.contains("Cuda failure"), "{text}");
}
