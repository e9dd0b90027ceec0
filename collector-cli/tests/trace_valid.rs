//! Every trace `ncclshim trace` writes is valid for Perfetto's JSON importer
//! (`tests/support/trace_validate.rs`): over every committed fixture (real captures, synthetic
//! scenarios, the profiler plugin's emulated 8-rank jobs) and every scenario generated afresh.
//! Plus what a user must see in them: hangs drawn up to the end, failures as markers, and the
//! `-o -` / `-o x.json.gz` outputs.

mod support;
// Perfetto's importer's rules (test support shared with the trace crate and the lab).
#[allow(dead_code)]
#[path = "../../tests/support/trace_validate.rs"]
mod trace_validate;

use ncclshim_diagnose::load;
use ncclshim_diagnose::model::JobModel;
use ncclshim_fixtures::scenarios;
use ncclshim_trace::{build_trace, IN_FLIGHT_STATE};
use serde_json::Value;
use std::path::{Path, PathBuf};
use trace_validate::{in_flight_slices_have_length, validate};

fn trace_of(dir: &Path) -> Value {
    let files = load::find_dumps(dir).unwrap();
    let loaded = load::load_files(dir, &files, None);
    assert!(!loaded.dumps.is_empty(), "{}", dir.display());
    let job = JobModel::build(&loaded.dumps, |d| load::display_path(dir, &d.path));
    build_trace(&loaded.dumps, &job)
}

fn events(t: &Value) -> &Vec<Value> {
    t["traceEvents"].as_array().unwrap()
}

fn fixture(name: &str) -> PathBuf {
    support::captures::fixture_dirs()
        .into_iter()
        .find(|d| d.file_name().is_some_and(|n| n == name))
        .unwrap_or_else(|| panic!("fixture {name}"))
}

#[test]
fn every_fixture_gives_a_valid_trace() {
    let dirs = support::captures::fixture_dirs();
    assert!(dirs.len() >= 10, "{dirs:?}");
    for dir in dirs {
        let t = trace_of(&dir);
        let s = validate(&t).unwrap_or_else(|e| panic!("{}:\n{}", dir.display(), e.join("\n")));
        assert!(s.slices > 0, "{}: {s:?}", dir.display());
        let empty = in_flight_slices_have_length(&t, IN_FLIGHT_STATE);
        assert!(empty.is_empty(), "{}:\n{}", dir.display(), empty.join("\n"));
    }
}

#[test]
fn every_scenario_gives_a_valid_trace() {
    for (name, build) in scenarios::ALL {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path()).unwrap();
        let t = trace_of(dir.path());
        validate(&t).unwrap_or_else(|e| panic!("{name}:\n{}", e.join("\n")));
    }
}

/// The emulated 8-rank hang, both record shapes: seven ranks wait in seq 5's kernel. Their
/// unfinished work is drawn up to the last sign of life of the rank, and marked.
#[test]
fn the_hang_is_visible_up_to_the_last_sign_of_life() {
    for name in ["hang-8ranks", "hang-8ranks-summarized"] {
        let t = trace_of(&fixture(name));
        let ev = events(&t);
        let unfinished: Vec<&Value> = ev
            .iter()
            .filter(|e| e["args"]["unfinished"] == true)
            .collect();
        assert!(!unfinished.is_empty(), "{name}");
        for e in &unfinished {
            assert!(e["name"].as_str().unwrap().ends_with("(unfinished)"), "{e}");
            assert_eq!(e["args"]["state"], "in flight at end", "{e}");
            // Up to the process's latest event of any kind (its last record, or a GPU span
            // placed by its GPU-measured duration); work that started at that last sign of
            // life is drawn 1 µs long from there, never 0-length.
            let no_later_sign = |o: &Value| {
                o["args"]["drawn_to"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("no later sign of life"))
            };
            let last = ev
                .iter()
                .filter(|o| o["pid"] == e["pid"] && o["ph"] != "M" && !no_later_sign(o))
                .map(|o| o["ts"].as_f64().unwrap() + o["dur"].as_f64().unwrap_or(0.0))
                .fold(f64::MIN, f64::max);
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            if no_later_sign(e) {
                assert_eq!(dur, 1.0, "{e}");
                assert!(ts >= last - 0.002, "{name}: {e} starts {ts}, last {last}");
            } else {
                assert!(
                    (ts + dur - last).abs() < 0.002,
                    "{name}: {e} ends {}, last {last}",
                    ts + dur
                );
            }
        }
        let pids: std::collections::BTreeSet<u64> = unfinished
            .iter()
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert!(pids.len() >= 7, "{name}: {pids:?}");
        // Small synthetic tids, each track named.
        for e in ev.iter().filter(|e| e["ph"] == "X") {
            let tid = e["tid"].as_u64().unwrap();
            assert!(tid < 1000, "{e}");
            assert!(
                ev.iter().any(|m| m["ph"] == "M"
                    && m["name"] == "thread_name"
                    && m["pid"] == e["pid"]
                    && m["tid"] == tid),
                "{e}"
            );
        }
    }
}

/// A real failure (ncclCommInitRank without a GPU): an instant marker with the return code's
/// name and NCCL's own error text.
#[test]
fn failures_are_instant_markers_with_nccls_error_text() {
    let t = trace_of(&fixture("init-no-gpu-cu11"));
    let failures: Vec<&Value> = events(&t)
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "failure")
        .collect();
    let init = failures
        .iter()
        .find(|e| e["args"]["call"] == "ncclCommInitRank")
        .unwrap_or_else(|| panic!("{failures:?}"));
    assert_eq!(init["s"], "t");
    assert!(init["name"]
        .as_str()
        .unwrap()
        .starts_with("ncclCommInitRank failed: nccl"));
    assert!(init["args"]["rc_name"]
        .as_str()
        .unwrap()
        .starts_with("nccl"));
    assert!(
        !init["args"]["error_text"].as_str().unwrap_or("").is_empty(),
        "{init}"
    );
}

/// A process killed in the middle (the dead-peer scenario): a process-scoped marker at its
/// last sign of life.
#[test]
fn a_process_that_died_gets_an_end_marker() {
    let t = trace_of(&fixture("c20-dead-peer"));
    let ends: Vec<&Value> = events(&t)
        .iter()
        .filter(|e| {
            e["ph"] == "i"
                && e["s"] == "p"
                && e["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("process ended without a clean exit")
        })
        .collect();
    assert!(!ends.is_empty());
}

fn ncclshim() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_ncclshim"))
}

#[test]
fn output_to_stdout_and_to_gzip() {
    use std::io::Read;
    let dir = fixture("c19-desync");
    let out = ncclshim()
        .args(["trace", "-o", "-"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let from_stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
    validate(&from_stdout).unwrap();
    assert!(!Path::new("-").exists(), "no file named '-'");

    let tmp = tempfile::tempdir().unwrap();
    let gz = tmp.path().join("t.json.gz");
    let out = ncclshim()
        .args(["trace", "-o"])
        .arg(&gz)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&gz).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut text)
        .unwrap();
    let from_gz: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        events(&from_gz).len(),
        events(&from_stdout).len(),
        "same trace either way"
    );

    let plain = tmp.path().join("t.json");
    let out = ncclshim()
        .args(["trace", "-o"])
        .arg(&plain)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&std::fs::read(&plain).unwrap()).unwrap();
    validate(&v).unwrap();
}

/// `ncclshim trace` streams one process at a time since the whole-job JSON tree was dropped
/// (BENCHMARKS.md, "trace at scale"); its events are still exactly those the tree gave.
/// `tests/trace-golden/*.json` were written by the last build with the tree (main at 69eb52b),
/// then rewritten when calls in flight at the end gained `state` / `drawn_to` and a length (no
/// more 0-length hangs) and end markers `last_sign_of_life` (branch h-trace): checked then that
/// those were the only differences, every other event unchanged.
/// Events are compared as a multiset: the streamed trace groups them by process (each sorted
/// by time), the old one sorted all of them by time.
#[test]
fn the_streamed_trace_has_the_events_of_the_whole_job_trace() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trace-golden");
    for name in [
        "c20-dead-peer",
        "hang-8ranks-summarized",
        "init-no-gpu-cu11",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.json");
        let out = ncclshim()
            .args(["trace", "-o"])
            .arg(&path)
            .arg(fixture(name))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        let read = |p: &Path| -> Value {
            serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{p:?}: {e}")))
                .unwrap()
        };
        let (mut now, mut then) = (read(&path), read(&golden.join(format!("{name}.json"))));
        let multiset = |t: &mut Value| {
            let mut events: Vec<String> = events(t).iter().map(Value::to_string).collect();
            events.sort();
            t["traceEvents"] = Value::Null;
            events
        };
        let (events_now, events_then) = (multiset(&mut now), multiset(&mut then));
        assert!(events_then.len() > 10, "{name}");
        assert_eq!(events_now, events_then, "{name}: the events");
        assert_eq!(now, then, "{name}: displayTimeUnit and otherData");
        validate(&read(&path)).unwrap();
    }
}
