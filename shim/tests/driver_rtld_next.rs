//! Regression test for the RTLD_NEXT trap: glibc answers `dlsym(RTLD_NEXT, …)` relative to the
//! caller's return address, so an interposed `dlsym` that calls the real one from its own frame
//! hands a `puts` wrapper itself back. The shim's tail-jump trampoline must keep every other
//! library's RTLD_NEXT lookups exactly as they are without it.
// The hooks exist on x86_64 Linux only (naked-asm trampoline and stubs).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod driver_common;

use driver_common::*;
use std::path::Path;
use std::process::Command;

struct Built {
    _tmp: tempfile::TempDir,
    prog: std::path::PathBuf,
    wrap: std::path::PathBuf,
    naive: std::path::PathBuf,
}

fn build() -> Built {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = repo_root().join("tests/c/driver");
    let wrap = dir.join("librtld_next_wrap.so");
    cc(
        &["-shared", "-fPIC"],
        &wrap,
        &[src.join("rtld_next_wrap.c")],
        &["-ldl".into()],
    );
    let naive = dir.join("libnaive_dlsym.so");
    cc(
        &["-shared", "-fPIC"],
        &naive,
        &[src.join("naive_dlsym.c")],
        &["-ldl".into()],
    );
    let prog = build_program(
        dir,
        "rtld_next_main",
        &[
            format!("-L{}", dir.display()),
            "-lrtld_next_wrap".into(),
            format!("-Wl,-rpath,{}", dir.display()),
        ],
    );
    Built {
        _tmp: tmp,
        prog,
        wrap,
        naive,
    }
}

fn run_with(prog: &Path, preload: &str) -> std::process::Output {
    let dumps = tempfile::tempdir().unwrap();
    Command::new(prog)
        .env("LD_PRELOAD", preload)
        .env("NCCLSHIM_DIR", dumps.path())
        .output()
        .unwrap()
}

const EXPECTED: &str = "[wrapped] hello\nprobe=intercepted\npath_set=1\n";

#[test]
fn naive_dlsym_interposer_breaks_rtld_next_which_this_test_detects() {
    let b = build();
    let out = run_with(&b.prog, b.naive.to_str().unwrap());
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("returned the wrapper itself"));
}

#[test]
fn rtld_next_wrappers_still_reach_libc_under_the_shim() {
    let b = build();
    let plain = Command::new(&b.prog).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), EXPECTED);
    let shim = shim_so();
    let shim = shim.to_str().unwrap();
    let wrap = b.wrap.to_str().unwrap();
    // Linked-in wrapper, and the wrapper preloaded after and before the shim.
    for preload in [
        shim.to_owned(),
        format!("{shim} {wrap}"),
        format!("{wrap} {shim}"),
    ] {
        let out = run_with(&b.prog, &preload);
        assert!(
            out.status.success(),
            "{preload}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), EXPECTED, "{preload}");
        assert!(
            out.stderr.is_empty(),
            "{preload}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
