//! Fatal-signal capture is invisible to the host: for each way a process can die or handle a
//! signal, the program is run with and without the shim (real PyPI libnccl) and must print the
//! same and end with the same wait status (signal, core-dump bit, exit code); the dump then says
//! which signal ended the process, how (fault or sent) and from where.

mod common;

use common::*;
use ncclshim_format::reader::{read_dump, SignalInfo};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn build(out_dir: &Path) -> PathBuf {
    let root = repo_root();
    let libdir = nccl_lib_dir(Wheel::Cu12);
    let prog = out_dir.join("signals");
    let o = Command::new("cc")
        .arg("-Wall")
        .arg("-o")
        .arg(&prog)
        .arg(root.join("tests/c/signals.c"))
        .arg(format!("-I{}", root.join("tests/c").display()))
        .arg(format!("-L{}", libdir.display()))
        .arg("-l:libnccl.so.2")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    prog
}

/// Runs `cmd` in `cwd` with the given core-size limit; no status check.
fn run_raw(mut cmd: Command, cwd: &Path, core: u64) -> Output {
    cmd.current_dir(cwd);
    // SAFETY: setrlimit is async-signal-safe and the only thing the child does before exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: core,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &lim);
            Ok(())
        });
    }
    cmd.output().expect("spawn")
}

/// The program's outcome bare and under the shim, plus the signal its dump recorded.
fn compare(mode: &str, core: u64, extra_env: &[(&str, &str)]) -> (Output, Option<SignalInfo>) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build(tmp.path());
    let bare_cwd = tmp.path().join("bare");
    let shim_cwd = tmp.path().join("shim");
    std::fs::create_dir_all(&bare_cwd).unwrap();
    std::fs::create_dir_all(&shim_cwd).unwrap();
    let mut bare = Command::new(&prog);
    bare.arg(mode);
    let bare = run_raw(bare, &bare_cwd, core);
    let dir = tmp.path().join("dumps");
    let mut shimmed = preloaded(&prog, &dir);
    shimmed.arg(mode).envs(extra_env.iter().copied());
    let shimmed = run_raw(shimmed, &shim_cwd, core);
    assert_eq!(
        String::from_utf8_lossy(&shimmed.stdout),
        String::from_utf8_lossy(&bare.stdout),
        "{mode}: stdout differs"
    );
    assert_eq!(
        shimmed.status.into_raw(),
        bare.status.into_raw(),
        "{mode}: wait status differs ({:?} vs {:?})",
        shimmed.status,
        bare.status
    );
    let files = dump_files(&dir);
    assert_eq!(files.len(), 1, "{mode}: {files:?}");
    let d = read_dump(&files[0]).unwrap();
    (shimmed, d.header.signal)
}

#[test]
fn segfault_dies_the_same_and_is_recorded_as_a_fault() {
    let (out, sig) = compare("segv", 0, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    let sig = sig.expect("signal recorded");
    assert_eq!(sig.signo, libc::SIGSEGV as u32);
    assert!(sig.code > 0, "a kernel-raised fault: {sig:?}");
    assert_eq!(sig.addr, 0, "the faulting address (NULL)");
    assert_ne!(sig.tid, 0);
}

#[test]
fn core_dump_bit_is_unchanged() {
    // With core dumps allowed, the wait status (its core bit included) must be the same: the
    // fault is re-raised under the default disposition, not replaced by a kill.
    let (out, sig) = compare("segv", libc::RLIM_INFINITY, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    assert!(sig.is_some());
}

#[test]
fn abort_and_a_raised_sigterm_keep_their_status() {
    let (out, sig) = compare("abort", 0, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT));
    assert_eq!(sig.unwrap().signo, libc::SIGABRT as u32);
    let (out, sig) = compare("term", 0, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
    let sig = sig.unwrap();
    assert_eq!(sig.signo, libc::SIGTERM as u32);
    assert!(sig.code <= 0, "sent by a process: {sig:?}");
    assert_ne!(sig.sender_pid, 0);
}

#[test]
fn a_handler_installed_before_nccl_still_runs_with_siginfo() {
    let (out, sig) = compare("own-before", 0, &[]);
    assert_eq!(out.status.code(), Some(42));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("own handler: sig=11 code=1 addr=(nil)"),
        "{text}"
    );
    assert_eq!(sig.unwrap().signo, libc::SIGSEGV as u32);
}

#[test]
fn a_handler_installed_after_nccl_replaces_ours() {
    let (out, sig) = compare("own-after", 0, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("plain handler: sig=15 n=1"));
    assert_eq!(sig, None, "our handler was replaced, as it must be");
}

#[test]
fn sa_resethand_runs_once_then_the_default_kills() {
    let (out, sig) = compare("resethand", 0, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
    assert!(String::from_utf8_lossy(&out.stdout).contains("plain handler: sig=15 n=1"));
    assert_eq!(sig.unwrap().signo, libc::SIGTERM as u32);
}

#[test]
fn sa_restart_still_restarts_interrupted_reads() {
    let (out, _) = compare("restart", 0, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("read=1 after 1 signal(s)"), "{text}");
}

#[test]
fn an_ignored_signal_stays_ignored() {
    let (out, sig) = compare("ignored", 0, &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("still here"));
    assert_eq!(sig, None);
}

#[test]
fn signals_can_be_turned_off() {
    let (out, sig) = compare("segv", 0, &[("NCCLSHIM_SIGNALS", "0")]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    assert_eq!(sig, None);
}

#[test]
fn python_faulthandler_still_prints_its_traceback() {
    let lib = nccl_lib_dir(Wheel::Cu12).join("libnccl.so.2");
    let script = format!(
        // A global lookup (the preloaded export comes first), as PyTorch's own linking does.
        "import ctypes\nctypes.CDLL({:?}, mode=ctypes.RTLD_GLOBAL)\nlib = ctypes.CDLL(None)\nv = ctypes.c_int()\nprint('rc', lib.ncclGetVersion(ctypes.byref(v)), flush=True)\nctypes.string_at(0)\n",
        lib.display().to_string()
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut bare = Command::new("python3");
    bare.args(["-X", "faulthandler", "-c", &script]);
    let bare = run_raw(bare, tmp.path(), 0);
    let dir = tmp.path().join("dumps");
    let mut shimmed = preloaded(Path::new("python3"), &dir);
    shimmed.args(["-X", "faulthandler", "-c", &script]);
    let shimmed = run_raw(shimmed, tmp.path(), 0);
    assert_eq!(shimmed.status.into_raw(), bare.status.into_raw());
    assert_eq!(shimmed.status.signal(), Some(libc::SIGSEGV));
    for o in [&bare, &shimmed] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("Fatal Python error: Segmentation fault"),
            "{err}"
        );
    }
    let d = read_dump(&dump_files(&dir)[0]).unwrap();
    assert_eq!(d.header.signal.map(|s| s.signo), Some(libc::SIGSEGV as u32));
}
