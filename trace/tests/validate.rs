//! The trace validator (`tests/support/trace_validate.rs`) finds what it says it finds: the
//! rules of Perfetto's JSON importer, on small hand-made traces.

#[allow(dead_code)]
#[path = "../../tests/support/trace_validate.rs"]
mod trace_validate;

use serde_json::{json, Value};
use trace_validate::*;

fn x(tid: u64, ts: f64, dur: f64) -> Value {
    json!({"ph": "X", "name": "s", "pid": 1, "tid": tid, "ts": ts, "dur": dur})
}

#[test]
fn nested_and_sequential_slices_pass() {
    let t = json!({"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}},
        x(1, 0.0, 10.0), x(1, 0.0, 5.0), x(1, 5.0, 5.0), x(1, 10.0, 1.0),
        {"ph": "i", "s": "t", "name": "i", "pid": 1, "tid": 1, "ts": 10.5},
        {"ph": "B", "name": "b", "pid": 1, "tid": 2, "ts": 1.0},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 2.0},
        {"ph": "b", "cat": "c", "id": 3, "name": "a", "pid": 1, "tid": 3, "ts": 1.0},
        {"ph": "e", "cat": "c", "id": 3, "name": "a", "pid": 1, "tid": 3, "ts": 9.0},
    ]});
    let s = validate(&t).unwrap();
    assert_eq!(s.slices, 6);
    assert_eq!(s.tracks, 2);
}

/// The negative control: the overlap `ncclshim trace` used to write (a slice that starts
/// inside another and ends after it, on one track) is rejected.
#[test]
fn overlapping_slices_on_one_track_are_rejected() {
    let t = json!([x(1, 0.0, 10.0), x(1, 5.0, 10.0)]);
    let e = validate(&t).unwrap_err();
    assert!(e[0].contains("without nesting"), "{e:?}");
    // The same slices on two tracks are fine.
    assert!(validate(&json!([x(1, 0.0, 10.0), x(2, 5.0, 10.0)])).is_ok());
}

#[test]
fn every_other_rule_is_enforced() {
    let cases = [
        (json!([x(1, 5.0, 1.0), x(1, 0.0, 1.0)]), "out of order"),
        (json!([x(1, 0.0, -1.0)]), "dur >= 0"),
        (json!([x(1u64 << 40, 0.0, 1.0)]), "tid not an integer"),
        (
            json!([{"ph": "X", "name": "s", "pid": 1, "ts": 0.0, "dur": 1.0}]),
            "tid missing",
        ),
        (
            json!([{"ph": "B", "name": "s", "pid": 1, "tid": 1, "ts": 0.0}]),
            "never closed",
        ),
        (
            json!([{"ph": "E", "pid": 1, "tid": 1, "ts": 0.0}]),
            "without an open B",
        ),
        (
            json!([{"ph": "b", "cat": "c", "id": 1, "name": "a", "pid": 1, "tid": 1, "ts": 0.0}]),
            "without an e",
        ),
        (
            json!([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1}]),
            "without its argument",
        ),
        (
            json!([x(1, 0.0, 1.0), {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}}]),
            "metadata after",
        ),
        (
            json!([{"ph": "i", "s": "x", "name": "i", "pid": 1, "tid": 1, "ts": 0.0}]),
            "scope",
        ),
        (json!({"events": []}), "traceEvents"),
    ];
    for (t, want) in cases {
        let e = validate(&t).unwrap_err();
        assert!(e.iter().any(|p| p.contains(want)), "{want}: {e:?}");
    }
}
