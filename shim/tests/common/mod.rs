//! Shared helpers for the shim's integration tests: where `libncclshim.so` is, the real NCCL
//! wheels (fetched by `scripts/fetch-nccl.sh`), compiling the C driver, running a command under
//! the preload and reading the dump it left.
#![allow(dead_code)]

use ncclshim_dump::{BlobKind, CallId, RecordKind};
use ncclshim_format::reader::{read_dump, Dump, Record};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `target/<profile>/libncclshim.so`, built with this test binary (the crate is cdylib + rlib).
/// The `libncclshim.so` built with this test binary. `cargo test` refreshes
/// `target/<profile>/deps/libncclshim.so` but does not copy it up to `target/<profile>/`
/// (only `cargo build` does), so the `deps` one is preferred: the other may be stale.
pub fn shim_so() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libncclshim.so"),
        deps.parent().unwrap().join("libncclshim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libncclshim.so not built")
}

/// The NCCL wheel flavours the tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wheel {
    Cu12,
    Cu11,
}

impl Wheel {
    pub fn dir_name(self) -> &'static str {
        match self {
            Wheel::Cu12 => "cu12",
            Wheel::Cu11 => "cu11",
        }
    }
}

static FETCHED: OnceLock<PathBuf> = OnceLock::new();

/// `.cache/nccl`, populated by `scripts/fetch-nccl.sh` on first use (idempotent, pip from PyPI).
pub fn nccl_cache() -> &'static Path {
    FETCHED.get_or_init(|| {
        let root = repo_root();
        let cache = root.join(".cache/nccl");
        let out = Command::new("bash")
            .arg(root.join("scripts/fetch-nccl.sh"))
            .arg(&cache)
            .output()
            .expect("run fetch-nccl.sh");
        assert!(
            out.status.success(),
            "fetch-nccl.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cache
    })
}

/// Directory holding `libnccl.so.2` of a wheel.
pub fn nccl_lib_dir(w: Wheel) -> PathBuf {
    nccl_cache().join(w.dir_name()).join("lib")
}

/// The wheel's version string ("2.21.5").
pub fn wheel_version(w: Wheel) -> String {
    std::fs::read_to_string(nccl_cache().join(w.dir_name()).join("VERSION"))
        .unwrap()
        .trim()
        .to_owned()
}

/// `2.21.5` -> 22105, NCCL's version code.
pub fn version_code(v: &str) -> i64 {
    let p: Vec<i64> = v.split('.').map(|x| x.parse().unwrap()).collect();
    p[0] * 10000 + p[1] * 100 + p[2]
}

/// Compiles `tests/c/nccl_fail.c` against a wheel's libnccl (a program, or with `lib` a shared
/// library exporting `nccl_fail_run`), into `out_dir`.
pub fn compile_driver(w: Wheel, out_dir: &Path, lib: bool) -> PathBuf {
    let root = repo_root();
    let libdir = nccl_lib_dir(w);
    let out = out_dir.join(if lib { "libnccl_fail.so" } else { "nccl_fail" });
    let mut cmd = Command::new("cc");
    cmd.arg("-Wall").arg("-o").arg(&out);
    if lib {
        cmd.args(["-shared", "-fPIC", "-DNCCL_FAIL_LIB"]);
    }
    cmd.arg(root.join("tests/c/nccl_fail.c"))
        .arg(format!("-I{}", root.join("tests/c").display()))
        .arg(format!("-L{}", libdir.display()))
        .arg("-l:libnccl.so.2")
        .arg(format!("-Wl,-rpath,{}", libdir.display()));
    let o = cmd.output().expect("cc");
    assert!(
        o.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A command with the shim preloaded and dumps going to `dir`. NCCL_* from the test's own
/// environment is cleared so only what a test sets reaches NCCL.
pub fn preloaded(program: &Path, dir: &Path) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NCCL") {
            c.env_remove(&k);
        }
    }
    c.env("LD_PRELOAD", shim_so()).env("NCCLSHIM_DIR", dir);
    c
}

pub fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("spawn");
    assert!(
        o.status.success(),
        "{cmd:?} failed ({:?}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Every dump file in `dir`.
pub fn dump_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// The one shim dump in `dir`.
pub fn single_dump(dir: &Path) -> Dump {
    let files = dump_files(dir);
    assert_eq!(
        files.len(),
        1,
        "expected one dump in {}: {files:?}",
        dir.display()
    );
    let d = read_dump(&files[0]).expect("readable dump");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    d
}

pub fn calls(d: &Dump, id: CallId) -> Vec<&Record> {
    d.records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Call) && r.call() == Some(id))
        .collect()
}

/// The error text attached to a record, if any.
pub fn error_text(d: &Dump, r: &Record) -> Option<String> {
    d.blob(r.blob)
        .filter(|b| b.kind() == Some(BlobKind::ErrorText))
        .map(|b| b.text())
}

/// The JSON of every snapshot blob of one kind, in record order.
pub fn snapshots(d: &Dump, kind: BlobKind) -> Vec<serde_json::Value> {
    d.records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Snapshot))
        .filter_map(|r| d.blob(r.blob))
        .filter(|b| b.kind() == Some(kind))
        .map(|b| serde_json::from_slice(&b.bytes).expect("snapshot JSON"))
        .collect()
}

/// `key=value` fields of the driver's output line that starts with `prefix`.
pub fn field(stdout: &str, prefix: &str, key: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix} in {stdout}"));
    let pat = format!("{key}=");
    let start = line
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + pat.len();
    let rest = &line[start..];
    if key == "last_error" {
        return rest.to_owned();
    }
    rest.split_whitespace().next().unwrap_or("").to_owned()
}

pub fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}
