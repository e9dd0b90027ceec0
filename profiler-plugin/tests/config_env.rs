//! The plugin's `NCCLSHIM_*` values as NCCL meets them: the built plugin loaded the way NCCL
//! loads it (the emulator), one child process per value, the activation mask NCCL receives at
//! `init` and the plugin's stderr checked by the parent (issue 22 item 7: `-1`, `0`, `,,,`
//! turned profiling off silently, `banana` warned with an empty list, and
//! `NCCLSHIM_PROFILER_RING_SLOTS=1G` made a 2 GB file).

mod emulator;

use emulator::{plugin_path, prof_dumps};
use nccl_profiler_ncclshim::mask::DEFAULT_MASK;
use ncclshim_format::reader::read_dump;
use std::process::Command;
use std::sync::atomic::Ordering;

const CHILD: &str = "NCCLSHIM_PROFCFG_CHILD";

/// In the child: one communicator init and finalize; prints the mask NCCL was handed.
fn child_init() {
    let p = emulator::Plugin::load(&plugin_path(), None).expect("load");
    emulator::MASK.store(0, Ordering::Relaxed);
    let (rc, ctx) = p.init(0x5eed, Some("cfg"), 1, 2, 0);
    assert_eq!(rc, 0);
    println!("mask=0x{:x}", emulator::MASK.load(Ordering::Relaxed));
    assert_eq!(p.finalize(ctx), 0);
}

/// Runs `test` again as a child with `env`; returns (mask handed to NCCL, stderr, dump dir).
fn child(test: &str, env: &[(&str, &str)]) -> (u32, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("NCCLSHIM_DIR", dir.path().join("dumps"))
        .env_remove("NCCLSHIM_DISABLE")
        .env_remove("NCCLSHIM_PROFILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let mask = stdout
        .lines()
        // The harness prints `test NAME ... ` before the test's own output, on the same line.
        .find_map(|l| l.split("mask=0x").nth(1))
        .and_then(|h| u32::from_str_radix(h.split_whitespace().next()?, 16).ok())
        .unwrap_or_else(|| panic!("no mask line: {stdout}"));
    (mask, stderr, dir)
}

/// The plugin's lines about `var`.
fn lines_of<'a>(stderr: &'a str, var: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| l.contains(&format!("{var}=")))
        .collect()
}

/// `NCCLSHIM_PROFILE=raw` gives NCCL the default mask and says so in exactly `line`.
fn profile_reads_as_default(test: &str, raw: &str, line: &str) {
    if std::env::var_os(CHILD).is_some() {
        return child_init();
    }
    let (mask, stderr, _dir) = child(test, &[("NCCLSHIM_PROFILE", raw)]);
    assert_eq!(mask, DEFAULT_MASK, "NCCLSHIM_PROFILE={raw}: {stderr}");
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_PROFILE"),
        vec![line],
        "{stderr}"
    );
}

#[test]
fn profile_minus_one_uses_the_default() {
    profile_reads_as_default(
        "profile_minus_one_uses_the_default",
        "-1",
        "ncclshim: NCCLSHIM_PROFILE=-1 selects no event types (`none` turns profiling off); using the default coll,p2p,kernelch",
    );
}

#[test]
fn profile_zero_uses_the_default() {
    profile_reads_as_default(
        "profile_zero_uses_the_default",
        "0",
        "ncclshim: NCCLSHIM_PROFILE=0 selects no event types (`none` turns profiling off); using the default coll,p2p,kernelch",
    );
}

#[test]
fn profile_of_separators_only_uses_the_default() {
    profile_reads_as_default(
        "profile_of_separators_only_uses_the_default",
        ",,,",
        "ncclshim: NCCLSHIM_PROFILE=,,, names no event types; using the default coll,p2p,kernelch",
    );
}

#[test]
fn profile_of_an_unknown_name_uses_the_default() {
    profile_reads_as_default(
        "profile_of_an_unknown_name_uses_the_default",
        "banana",
        "ncclshim: NCCLSHIM_PROFILE=banana has no known event name (banana); using the default coll,p2p,kernelch",
    );
}

/// `none` is the documented way to ask for nothing: followed, without a line.
#[test]
fn profile_none_is_followed_quietly() {
    if std::env::var_os(CHILD).is_some() {
        return child_init();
    }
    let (mask, stderr, _dir) = child(
        "profile_none_is_followed_quietly",
        &[("NCCLSHIM_PROFILE", "none")],
    );
    assert_eq!(mask, 0);
    assert!(lines_of(&stderr, "NCCLSHIM_PROFILE").is_empty(), "{stderr}");
}

#[test]
fn huge_profiler_ring_slots_use_the_default() {
    if std::env::var_os(CHILD).is_some() {
        return child_init();
    }
    let (_, stderr, dir) = child(
        "huge_profiler_ring_slots_use_the_default",
        &[("NCCLSHIM_PROFILER_RING_SLOTS", "1G")],
    );
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_PROFILER_RING_SLOTS"),
        vec![
            "ncclshim: NCCLSHIM_PROFILER_RING_SLOTS=1G is out of range (16..=1M slots); using 8192"
        ],
        "{stderr}"
    );
    let dumps = prof_dumps(&dir.path().join("dumps"));
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let size = std::fs::metadata(&dumps[0]).unwrap().len();
    assert!(size < 64 << 20, "a default-sized dump, not {size} bytes");
    assert_eq!(read_dump(&dumps[0]).unwrap().header.slots_per_ring, 8192);
}
