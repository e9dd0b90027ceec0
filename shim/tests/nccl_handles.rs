//! Handle lookups of NCCL (`dlsym(handle, "ncclX")`): vLLM's / SGLang's / Megatron's `pynccl`
//! (`ctypes.CDLL(path)` + `getattr`) and C `dlopen` users, against the real PyPI libnccl on a
//! machine without a GPU. Every call is recorded with its rc and NCCL's own text, goes to the
//! library the caller asked (two NCCLs in one process), and the program sees exactly what it
//! sees without the shim: same output, same `dladdr` answers, untouched lookups elsewhere.
// The dlsym / dladdr hooks exist on x86_64 Linux only.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use common::*;
use ncclshim_dump::{BlobKind, CallId, RecordKind};
use ncclshim_format::reader::Dump;
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib(w: Wheel) -> PathBuf {
    nccl_lib_dir(w).join("libnccl.so.2")
}

/// Runs the pynccl script bare and preloaded; asserts identical output; returns it and the dump.
fn pynccl(mode: &str, wheels: &[Wheel], env: &[(&str, &str)]) -> (String, Dump) {
    let tmp = tempfile::tempdir().unwrap();
    let script = repo_root().join("tests/python/pynccl_handle.py");
    let libs: Vec<PathBuf> = wheels.iter().map(|&w| lib(w)).collect();
    let mut bare = Command::new("python3");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NCCL") {
            bare.env_remove(&k);
        }
    }
    let bare = run(bare
        .arg(&script)
        .arg(mode)
        .args(&libs)
        .envs(env.iter().copied()));
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(Path::new("python3"), &dir)
        .arg(&script)
        .arg(mode)
        .args(&libs)
        .envs(env.iter().copied()));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        String::from_utf8(bare.stdout).unwrap(),
        "the shim changed what the program saw"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&bare.stderr)
    );
    (stdout, single_dump(&dir))
}

/// The text after `last_error=` on line `prefix`.
fn last_error(stdout: &str, prefix: &str) -> String {
    field(stdout, prefix, "last_error")
}

fn rc(stdout: &str, prefix: &str) -> i32 {
    field(stdout, prefix, "rc").parse().unwrap()
}

fn pynccl_uniqueid(w: Wheel) {
    let (stdout, d) = pynccl("uniqueid", &[w], &[("NCCL_SOCKET_IFNAME", "nonexistent0")]);
    let printed: u64 = field(&stdout, "0 ncclGetVersion", "version")
        .parse()
        .unwrap();
    assert_eq!(printed as i64, version_code(&wheel_version(w)));
    let v = calls(&d, CallId::NcclGetVersion);
    assert_eq!(v.len(), 1, "recorded once (no double wrapping)");
    assert_eq!((v[0].rc, v[0].arg("version")), (0, Some(printed)));
    let u = calls(&d, CallId::NcclGetUniqueId);
    assert_eq!(u.len(), 1);
    let urc = rc(&stdout, "0 ncclGetUniqueId");
    assert_ne!(urc, 0, "a bad NCCL_SOCKET_IFNAME must fail for real");
    assert_eq!(u[0].rc, urc);
    let text = error_text(&d, u[0]).expect("NCCL's error text");
    assert_eq!(text, last_error(&stdout, "0 ncclGetUniqueId"));
    assert!(text.contains("no socket interface found"), "{text}");
    // The library the program used is in the snapshot.
    let libs = snapshots(&d, BlobKind::Libraries);
    assert_eq!(libs[0]["nccl_paths"][0], lib(w).to_string_lossy().as_ref());
}

#[test]
fn pynccl_uniqueid_cu12() {
    pynccl_uniqueid(Wheel::Cu12);
}

#[test]
fn pynccl_uniqueid_cu11() {
    pynccl_uniqueid(Wheel::Cu11);
}

fn pynccl_init(w: Wheel) {
    let (stdout, d) = pynccl("init", &[w], &[]);
    assert_eq!(rc(&stdout, "0 ncclGetUniqueId"), 0);
    assert_eq!(calls(&d, CallId::NcclGetUniqueId)[0].rc, 0);
    let irc = rc(&stdout, "0 ncclCommInitRank");
    assert_ne!(irc, 0, "no GPU here: init must fail");
    let i = calls(&d, CallId::NcclCommInitRank);
    assert_eq!(i.len(), 1);
    assert_eq!(i[0].rc, irc);
    assert_eq!((i[0].arg("nranks"), i[0].arg("rank")), (Some(1), Some(0)));
    assert_eq!(
        error_text(&d, i[0]),
        Some(last_error(&stdout, "0 ncclCommInitRank"))
    );
}

#[test]
fn pynccl_init_cu12() {
    pynccl_init(Wheel::Cu12);
}

#[test]
fn pynccl_init_cu11() {
    pynccl_init(Wheel::Cu11);
}

/// cu12 and cu11 in one process, each through its own handle: each call reaches the library
/// it was looked up in (its own version, its own error text), and both libraries are in the
/// dump's library snapshots.
#[test]
fn two_libnccl_in_one_process() {
    let (stdout, d) = pynccl("mixed", &[Wheel::Cu12, Wheel::Cu11], &[]);
    let want: Vec<u64> = [Wheel::Cu12, Wheel::Cu11]
        .iter()
        .map(|&w| version_code(&wheel_version(w)) as u64)
        .collect();
    assert_eq!(want, [23203, 22105]);
    for (i, v) in want.iter().enumerate() {
        let printed: u64 = field(&stdout, &format!("{i} ncclGetVersion"), "version")
            .parse()
            .unwrap();
        assert_eq!(printed, *v);
    }
    let recorded: Vec<Option<u64>> = calls(&d, CallId::NcclGetVersion)
        .iter()
        .map(|r| r.arg("version"))
        .collect();
    assert_eq!(recorded, [Some(want[0]), Some(want[1])]);
    // Each library keeps its own last-error buffer, and the two hold different texts (cu12's
    // init failed on CUDA, cu11's uniqueId on the socket interface set in between): the text
    // recorded with each failure is the one its own library printed, so it was asked of the
    // library that failed.
    let inits = calls(&d, CallId::NcclCommInitRank);
    assert_eq!(inits.len(), 1);
    let init_text = last_error(&stdout, "0 ncclCommInitRank");
    assert_eq!(inits[0].rc, rc(&stdout, "0 ncclCommInitRank"));
    assert_eq!(error_text(&d, inits[0]), Some(init_text.clone()));
    assert!(init_text.contains("CUDA driver version"), "{init_text}");
    let uids = calls(&d, CallId::NcclGetUniqueId);
    assert_eq!(uids.len(), 2);
    assert_eq!(uids[0].rc, 0);
    assert_eq!(uids[1].rc, rc(&stdout, "1 ncclGetUniqueId"));
    assert_ne!(uids[1].rc, 0);
    let uid_text = last_error(&stdout, "1 ncclGetUniqueId");
    assert!(uid_text.contains("no socket interface found"), "{uid_text}");
    assert_eq!(error_text(&d, uids[1]), Some(uid_text));
    // Both libraries, each with its version, in the last library snapshot: cu11 was loaded
    // after cu12's calls, and that snapshot was stored at its first call (reason 3).
    let libs = snapshots(&d, BlobKind::Libraries);
    let last = libs.last().unwrap();
    let paths: Vec<&str> = last["nccl_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            lib(Wheel::Cu12).to_str().unwrap(),
            lib(Wheel::Cu11).to_str().unwrap()
        ]
    );
    let versions: Vec<i64> = last["libs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "nccl")
        .map(|l| l["version"].as_i64().unwrap())
        .collect();
    assert_eq!(versions, [23203, 22105]);
    let reasons: Vec<u64> = d
        .records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Snapshot))
        .filter(|r| r.arg("blob_kind") == Some(BlobKind::Libraries as u64))
        .map(|r| r.arg("reason").unwrap())
        .collect();
    assert!(reasons.contains(&3), "{reasons:?}");
}

fn compile_lookup(dir: &Path, w: Wheel, linked: bool) -> PathBuf {
    let out = dir.join(if linked {
        "handle_lookup_linked"
    } else {
        "handle_lookup"
    });
    let mut cmd = Command::new("cc");
    cmd.arg("-Wall")
        .arg("-o")
        .arg(&out)
        .arg(repo_root().join("tests/c/handle_lookup.c"))
        .arg("-ldl");
    if linked {
        let libdir = nccl_lib_dir(w);
        cmd.arg("-DLINKED")
            .arg(format!("-L{}", libdir.display()))
            .arg("-l:libnccl.so.2")
            .arg(format!("-Wl,-rpath,{}", libdir.display()));
    }
    let o = cmd.output().expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Runs the C program bare and preloaded: (bare stdout, preloaded stdout, dump dir).
fn lookup_runs(prog: &Path, w: Wheel) -> (String, String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let bare = run(Command::new(prog).arg(lib(w)));
    let out = run(preloaded(prog, tmp.path()).arg(lib(w)));
    (
        String::from_utf8(bare.stdout).unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        tmp,
    )
}

/// Lines of `s` that do not start with one of `skip`.
fn lines_but(s: &str, skip: &[&str]) -> Vec<String> {
    s.lines()
        .filter(|l| !skip.iter().any(|p| l.starts_with(p)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn c_dlopen_dlsym_is_bound_and_everything_else_untouched() {
    let w = Wheel::Cu12;
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_lookup(tmp.path(), w, false);
    let (bare, shim, dumps) = lookup_runs(&prog, w);
    let libname = "libnccl.so.2";
    let expected_bare = format!(
        "handle ncclGetErrorString found=1 same=1\n\
         handle pncclGetVersion found=1 same=1\n\
         handle ncclNoSuchFunction found=0 same=1\n\
         next ncclGetVersion found=0 same=1\n\
         default ncclGetVersion found=0 same=1\n\
         handle ncclGetVersion found=1 same=1\n\
         call ncclGetVersion rc=0 version=23203\n\
         dladdr ok=1 fname={libname} sname=ncclGetVersion saddr_is_real=1\n\
         dladdr1 ok=1 fname={libname} map={libname}\n\
         self dladdr ok=1 sname=(null)\n"
    );
    // `sname` is whichever of the aliases (ncclGetVersion / pncclGetVersion) glibc names; the
    // point is that the shim makes it name the same one.
    let bare_norm = bare.replace("sname=pncclGetVersion", "sname=ncclGetVersion");
    assert_eq!(bare_norm, expected_bare, "{bare}");
    // Under the shim: RTLD_NEXT / RTLD_DEFAULT find the preloaded export (glibc's own answer
    // too: same=1), the handle lookup of an exported name is bound (same=0), and everything
    // the program can observe about the bound pointer reads as without the shim.
    assert_eq!(
        lines_but(&shim, &["next ", "default ", "handle ncclGetVersion "]),
        lines_but(&bare, &["next ", "default ", "handle ncclGetVersion "]),
    );
    assert!(
        shim.contains("next ncclGetVersion found=1 same=1\n"),
        "{shim}"
    );
    assert!(
        shim.contains("default ncclGetVersion found=1 same=1\n"),
        "{shim}"
    );
    assert!(
        shim.contains("handle ncclGetVersion found=1 same=0\n"),
        "{shim}"
    );
    // nccl4py: dladdr of the global ncclGetVersion (the shim's export) names libnccl, at the
    // real function's address.
    let default_line = format!(
        "default dladdr ok=1 fname={} saddr_is_real=1\n",
        lib(w).display()
    );
    assert!(shim.contains(&default_line), "{shim}");
    // The bound call was recorded.
    let d = single_dump(dumps.path());
    let v = calls(&d, CallId::NcclGetVersion);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].arg("version"), Some(23203));
}

/// A program linked against libnccl that also dlopens it: the handle lookup answers the
/// linked export itself (one library, one wrapper set), recorded once per call.
#[test]
fn handle_of_the_linked_libnccl_gives_the_export() {
    let w = Wheel::Cu11;
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_lookup(tmp.path(), w, true);
    let (bare, shim, dumps) = lookup_runs(&prog, w);
    assert!(bare.contains("handle_is_linked=1\n"), "{bare}");
    assert!(shim.contains("handle_is_linked=1\n"), "{shim}");
    assert!(
        shim.contains("handle ncclGetVersion found=1 same=0\n"),
        "{shim}"
    );
    let skip = ["next ", "default ", "handle ncclGetVersion "];
    assert_eq!(lines_but(&shim, &skip), lines_but(&bare, &skip));
    let d = single_dump(dumps.path());
    let v = calls(&d, CallId::NcclGetVersion);
    assert_eq!(v.len(), 2, "the linked call and the looked-up one");
    assert!(v.iter().all(|r| r.arg("version") == Some(22105)));
}

/// Every `nccl*` the built library exports is in the handle-lookup table, so a new export in
/// `nccl/exports/` cannot silently miss its bound stubs.
#[test]
fn every_export_has_bound_stubs() {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(shim_so())
        .output()
        .expect("nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut exported: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|n| n.starts_with("nccl"))
        .collect();
    exported.sort();
    let mut table: Vec<&str> = ncclshim::nccl::handles::NAMES.to_vec();
    table.sort();
    assert_eq!(exported, table);
}
