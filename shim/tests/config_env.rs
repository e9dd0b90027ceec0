//! Invalid `NCCLSHIM_*` values, read inside a real program under the preloaded shim: each one
//! gives exactly one stderr line naming the variable, the value and what is used instead, the
//! program's own behaviour is unchanged, and the dump is written with the fallback geometry.

mod common;

use common::*;

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
            "ncclshim: NCCLSHIM_RING_SLOTS=-5 is not a number of slots (16..=16M); using 2048",
        ),
        (
            "NCCLSHIM_ARENA_BYTES",
            "ncclshim: NCCLSHIM_ARENA_BYTES=huge is not a number of bytes (4096..=1024G); using 4M",
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

#[test]
fn out_of_range_values_are_clamped_and_said_once() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir)
        .arg("version")
        .env("NCCLSHIM_RINGS", "0")
        .env("NCCLSHIM_RING_SLOTS", "4")
        .env("NCCLSHIM_CLOCK", "monotonic"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_RINGS"),
        vec!["ncclshim: NCCLSHIM_RINGS=0 is out of range (1..=4096 rings); using 1"],
        "{stderr}"
    );
    assert_eq!(
        lines_of(&stderr, "NCCLSHIM_RING_SLOTS"),
        vec!["ncclshim: NCCLSHIM_RING_SLOTS=4 is out of range (16..=16M slots); using 16"],
        "{stderr}"
    );
    assert!(lines_of(&stderr, "NCCLSHIM_CLOCK").is_empty(), "{stderr}");
    let d = single_dump(&dir);
    assert_eq!(d.header.slots_per_ring, 16);
}
