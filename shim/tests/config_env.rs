//! Invalid `NCCLSHIM_*` values, read inside a real program under the preloaded shim: each one
//! gives exactly one stderr line naming the variable, the value and what is used instead, the
//! program's own behaviour is unchanged, and the dump is written with the fallback geometry.

mod common;

use common::*;
use ncclshim_format::reader::Dump;

/// The stderr lines of one variable.
fn lines_of<'a>(stderr: &'a str, var: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| l.contains(&format!("{var}=")))
        .collect()
}

#[test]
fn each_invalid_value_gives_one_line_and_the_default_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir)
        .arg("version")
        .env("NCCLSHIM_RINGS", "lots")
        .env("NCCLSHIM_RING_SLOTS", "-5")
        .env("NCCLSHIM_ARENA_BYTES", "huge")
        .env("NCCLSHIM_CLOCK", "rdtsc"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (var, line) in [
        (
            "NCCLSHIM_RINGS",
            "ncclshim: NCCLSHIM_RINGS=lots is not a number of rings (1..=4096); using 64",
        ),
        (
            "NCCLSHIM_RING_SLOTS",
            "ncclshim: NCCLSHIM_RING_SLOTS=-5 is not a number of slots (16..=1M); using 2048",
        ),
        (
            "NCCLSHIM_ARENA_BYTES",
            "ncclshim: NCCLSHIM_ARENA_BYTES=huge is not a number of bytes (4096..=256M); using 4M",
        ),
        (
            "NCCLSHIM_CLOCK",
            "ncclshim: NCCLSHIM_CLOCK=rdtsc is not one of tsc, monotonic, auto; using auto",
        ),
    ] {
        assert_eq!(lines_of(&stderr, var), vec![line], "{stderr}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("ncclGetVersion rc=0"));
    let d = single_dump(&dir);
    assert_eq!(d.header.slots_per_ring, 2048);
}

/// Runs the driver's `version` call under the preloaded shim with `env`; returns its stderr
/// and the dump directory (kept alive by the returned temp dir).
fn version_with(env: &[(&str, &str)]) -> (String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let mut cmd = preloaded(&prog, &dir);
    cmd.arg("version");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ncclGetVersion rc=0"),
        "the program's own behaviour is unchanged"
    );
    (String::from_utf8_lossy(&out.stderr).into_owned(), tmp)
}

/// One out-of-range size: exactly one line naming it, and the default in the dump (issue 22
/// item 7: the maximum was used, `NCCLSHIM_RING_SLOTS=99999999999` made a 10.7 GB dump).
fn out_of_range_uses_the_default(var: &str, raw: &str, line: &str, check: impl Fn(&Dump, u64)) {
    let (stderr, tmp) = version_with(&[(var, raw)]);
    assert_eq!(lines_of(&stderr, var), vec![line], "{stderr}");
    let dir = tmp.path().join("dumps");
    let file = dump_files(&dir).pop().unwrap();
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < 16 << 20, "a default-sized dump, not {size} bytes");
    check(&single_dump(&dir), size);
}

#[test]
fn huge_ring_slots_use_the_default() {
    out_of_range_uses_the_default(
        "NCCLSHIM_RING_SLOTS",
        "99999999999",
        "ncclshim: NCCLSHIM_RING_SLOTS=99999999999 is out of range (16..=1M slots); using 2048",
        |d, _| assert_eq!(d.header.slots_per_ring, 2048),
    );
}

#[test]
fn ring_slots_below_the_minimum_use_the_default() {
    out_of_range_uses_the_default(
        "NCCLSHIM_RING_SLOTS",
        "4",
        "ncclshim: NCCLSHIM_RING_SLOTS=4 is out of range (16..=1M slots); using 2048",
        |d, _| assert_eq!(d.header.slots_per_ring, 2048),
    );
}

#[test]
fn zero_rings_use_the_default() {
    out_of_range_uses_the_default(
        "NCCLSHIM_RINGS",
        "0",
        "ncclshim: NCCLSHIM_RINGS=0 is out of range (1..=4096 rings); using 64",
        |d, _| assert_eq!(d.header.ring_count, 64),
    );
}

#[test]
fn a_terabyte_arena_uses_the_default() {
    out_of_range_uses_the_default(
        "NCCLSHIM_ARENA_BYTES",
        "1024G",
        "ncclshim: NCCLSHIM_ARENA_BYTES=1024G is out of range (4096..=256M bytes); using 4M",
        |d, _| assert_eq!(d.header.arena_size, 4 << 20),
    );
}

/// `NCCLSHIM_DISABLE=banana` turned recording off without a word: now it says so.
#[test]
fn an_unknown_disable_spelling_is_said_and_read_as_off() {
    let (stderr, tmp) = version_with(&[("NCCLSHIM_DISABLE", "banana")]);
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_DISABLE"),
        vec![
            "ncclshim: NCCLSHIM_DISABLE=banana is not one of 1, true, yes, on, 0, false, no, off; using 1 (recording off)"
        ],
        "{stderr}"
    );
    assert!(dump_files(&tmp.path().join("dumps")).is_empty());
}

#[test]
fn documented_disable_spellings_are_quiet() {
    for (raw, records) in [("yes", false), ("ON", false), ("off", true), ("0", true)] {
        let (stderr, tmp) = version_with(&[("NCCLSHIM_DISABLE", raw)]);
        assert!(
            lines_of(&stderr, "NCCLSHIM_DISABLE").is_empty(),
            "{raw}: {stderr}"
        );
        let dumps = dump_files(&tmp.path().join("dumps"));
        assert_eq!(!dumps.is_empty(), records, "NCCLSHIM_DISABLE={raw}");
    }
}

#[test]
fn an_unknown_signals_spelling_is_said_and_capture_stays_on() {
    let (stderr, _tmp) = version_with(&[("NCCLSHIM_SIGNALS", "sometimes")]);
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_SIGNALS"),
        vec![
            "ncclshim: NCCLSHIM_SIGNALS=sometimes is not one of 1, true, yes, on, 0, false, no, off; using 1 (fatal-signal capture on)"
        ],
        "{stderr}"
    );
}

/// A value with a newline in it still gives one line.
#[test]
fn a_multi_line_value_is_shown_on_one_line() {
    let (stderr, _tmp) = version_with(&[("NCCLSHIM_RINGS", "8\nrm -rf")]);
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_RINGS"),
        vec!["ncclshim: NCCLSHIM_RINGS=8\\nrm -rf is not a number of rings (1..=4096); using 64"],
        "{stderr}"
    );
}
