//! Helpers for the driver tests: building the libcuda TEST DOUBLE (`tests/doubles/libcuda`)
//! and the C programs under `tests/c/driver`, running them with and without the shim, and
//! reading the driver records of a dump. A directory module so Cargo does not build it as a test of its own.
#![allow(dead_code)]

use ncclshim_dump::layout::counters;
use ncclshim_dump::reader::{read_dump, Dump, Record};
use ncclshim_dump::{CallId, RecordKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../common/mod.rs"]
pub mod common;
pub use common::{repo_root, shim_so};

pub fn cc(args: &[&str], out: &Path, sources: &[PathBuf], extra: &[String]) {
    let o = Command::new("cc")
        .args(["-Wall", "-O1"])
        .args(args)
        .arg("-o")
        .arg(out)
        .args(sources)
        .args(extra)
        .output()
        .expect("cc");
    assert!(
        o.status.success(),
        "cc {out:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds the libcuda double as `<dir>/libcuda.so.1`; returns `dir` (for LD_LIBRARY_PATH).
pub fn build_double(dir: &Path) -> PathBuf {
    let lib = dir.join("double");
    std::fs::create_dir_all(&lib).unwrap();
    cc(
        &["-shared", "-fPIC", "-fvisibility=hidden"],
        &lib.join("libcuda.so.1"),
        &[repo_root().join("tests/doubles/libcuda/libcuda_double.c")],
        &[],
    );
    lib
}

/// Builds `tests/c/driver/<name>.c` into `<dir>/<name>`.
pub fn build_program(dir: &Path, name: &str, extra: &[String]) -> PathBuf {
    let out = dir.join(name);
    cc(
        &[],
        &out,
        &[repo_root().join(format!("tests/c/driver/{name}.c"))],
        extra,
    );
    out
}

/// A command with the double on the library path and a clean environment for the knobs;
/// `dumps` set means the shim is preloaded and writes there.
pub fn command(program: &Path, double: &Path, dumps: Option<&Path>) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("NCCL") || k.starts_with("LIBCUDA_DOUBLE") || k == "LD_PRELOAD" {
            c.env_remove(&k);
        }
    }
    c.env("LD_LIBRARY_PATH", double);
    if let Some(d) = dumps {
        c.env("LD_PRELOAD", shim_so()).env("NCCLSHIM_DIR", d);
    }
    c
}

pub fn output(cmd: &mut Command) -> Output {
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

pub fn dump_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

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

/// Driver call records (rc is a CUresult) in time order.
pub fn driver_calls(d: &Dump) -> Vec<&Record> {
    d.records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Call) && r.call().is_some_and(CallId::is_cuda))
        .collect()
}

pub fn calls_of(d: &Dump, id: CallId) -> Vec<&Record> {
    driver_calls(d)
        .into_iter()
        .filter(|r| r.call() == Some(id))
        .collect()
}

pub fn arg(r: &Record, name: &str) -> u64 {
    r.arg(name)
        .unwrap_or_else(|| panic!("{} has no arg {name}", r.call_name()))
}

/// The GPU snapshots the driver hooks wrote (reason 2), as JSON.
pub fn gpu_snapshots(d: &Dump) -> Vec<serde_json::Value> {
    d.records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Snapshot) && r.args[0] == 2)
        .filter_map(|r| d.blob(r.blob))
        .filter(|b| b.kind() == Some(ncclshim_dump::BlobKind::Gpu))
        .map(|b| serde_json::from_slice(&b.bytes).expect("gpu JSON"))
        .collect()
}

pub fn lookups(d: &Dump) -> u64 {
    d.header.counters[counters::SHIM_DRIVER_LOOKUPS]
}

pub fn wrapped(d: &Dump) -> u64 {
    d.header.counters[counters::SHIM_DRIVER_WRAPPED]
}

/// `key=value` from the first stdout line starting with `prefix`.
pub fn field(stdout: &str, prefix: &str, key: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{stdout}"));
    let pat = format!("{key}=");
    let start = line
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + pat.len();
    line[start..]
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_owned()
}

pub fn parse_num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None if s.starts_with('-') => s.parse::<i64>().unwrap() as u64,
        None => s.parse().unwrap(),
    }
}
