//! A host's first NCCL calls made on a thread with a small stack (Python's
//! `threading.stack_size(32768)`, C worker pools) behave exactly as without the shim: the same
//! sizes work, the same sizes crash, `pthread_create` refuses the same sizes. The shim's
//! once-per-process setup (the dump, the snapshots, host facts) and each function's first
//! resolution run on the recorder's own stack (`ncclshim_dump::own_stack`), so the first call
//! needs no more of the caller's stack than any other.
//!
//! Against the real PyPI libnccl, loaded `RTLD_LOCAL` by `dlopen` / `ctypes.CDLL` as frameworks
//! do; no GPU needed (`ncclGetUniqueId`'s rc is compared whatever it is).

mod common;

use common::*;
use ncclshim_dump::CallId;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Thread stack sizes tried, in KiB: below and around what NCCL's own first calls need (about
/// 17 KiB for `ncclGetUniqueId`), and comfortable ones.
const STACK_KIB: [usize; 6] = [16, 20, 24, 28, 32, 64];

fn libnccl() -> PathBuf {
    nccl_lib_dir(Wheel::Cu12).join("libnccl.so.2")
}

fn compile_small_stack(dir: &Path) -> PathBuf {
    let root = repo_root();
    let out = dir.join("small_stack");
    let o = Command::new("cc")
        .arg("-Wall")
        .arg("-o")
        .arg(&out)
        .arg(root.join("tests/c/small_stack.c"))
        .arg(format!("-I{}", root.join("tests/c").display()))
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// What the host sees of one run: its stdout and how it ended (exit code or signal).
fn seen(o: &Output) -> (String, Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        o.status.code(),
        o.status.signal(),
    )
}

/// Runs `program args` bare and with the shim preloaded; asserts the host saw the same, and
/// that a run that got through its calls recorded them.
fn same_with_and_without_shim(program: &Path, args: &[String], what: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let mut bare = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NCCL") {
            bare.env_remove(&k);
        }
    }
    let bare = bare.args(args).output().expect("spawn");
    let dir = tmp.path().join("dumps");
    let shim = preloaded(program, &dir).args(args).output().expect("spawn");
    assert_eq!(
        seen(&shim),
        seen(&bare),
        "{what}: the shim changed what the program saw (stderr with the shim: {})",
        String::from_utf8_lossy(&shim.stderr)
    );
    if shim.status.success() && seen(&shim).0.contains("ncclGetUniqueId rc=") {
        let d = single_dump(&dir);
        assert_eq!(calls(&d, CallId::NcclGetVersion).len(), 1, "{what}");
        assert_eq!(calls(&d, CallId::NcclGetUniqueId).len(), 1, "{what}");
    }
}

#[test]
fn first_calls_on_small_c_thread_stacks_behave_as_without_the_shim() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_small_stack(tmp.path());
    let lib = libnccl().display().to_string();
    for kib in STACK_KIB {
        let args = [lib.clone(), (kib * 1024).to_string()];
        same_with_and_without_shim(&prog, &args, &format!("{kib} KiB thread stack"));
    }
}

#[test]
fn first_calls_on_a_small_python_thread_stack_behave_as_without_the_shim() {
    // Python refuses thread stacks under 32 KiB itself.
    let script = repo_root().join("tests/python/small_stack.py");
    let lib = libnccl().display().to_string();
    for kib in [32, 64] {
        let args = [
            script.display().to_string(),
            lib.clone(),
            (kib * 1024).to_string(),
        ];
        same_with_and_without_shim(
            Path::new("python3"),
            &args,
            &format!("python, {kib} KiB thread stack"),
        );
    }
}
