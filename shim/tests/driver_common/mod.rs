//! Helpers for the driver tests: building the libcuda TEST DOUBLE (`tests/doubles/libcuda`)
//! and the C programs under `tests/c/driver`, running them with and without the shim, and
//! reading the driver records of a dump. A directory module so Cargo does not build it as a test of its own.
#![allow(dead_code)]

use ncclshim_dump::layout::counters;
use ncclshim_dump::{CallId, RecordKind};
use ncclshim_format::reader::{Dump, Record};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../common/mod.rs"]
pub mod common;
// Dump listing, reading, running and output parsing are the same for the NCCL tests. Not every
// driver test binary uses all of them (as with `dead_code` above).
#[allow(unused_imports)]
pub use common::{dump_files, field, repo_root, run, shim_so, single_dump};

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

pub fn parse_num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None if s.starts_with('-') => s.parse::<i64>().unwrap() as u64,
        None => s.parse().unwrap(),
    }
}
