//! PyTorch Flight Recorder dumps read beside the shim's, through the real `ncclshim report`:
//! - the small pickles of `tests/fixtures/flight-recorder/` (written by Python's own `pickle`
//!   by its `make.py`), one folder per format shape plus damaged ones;
//! - the Flight Recorder dumps inside the real GPU captures, compared with what PyTorch's own
//!   analyzer (`fr_trace`) printed on them (`tests/fixtures/real-gpu/2026-11-27/fr_trace.txt`):
//!   ncclshim must name everything `fr_trace` names, with the user's Python line;
//! - a directory holding only the Flight Recorder dumps of those captures (ranks without the
//!   shim): the same verdicts through the same story.

mod support;
// Perfetto's importer's rules (test support shared with the trace crate and the lab).
#[allow(dead_code)]
#[path = "../../tests/support/trace_validate.rs"]
mod trace_validate;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::cli::report_json;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flight-recorder")
}

fn real_gpu() -> PathBuf {
    support::captures::real_gpu_root().join("2026-11-27")
}

fn text_report(dir: &Path) -> String {
    support::cli::report(dir, &["--color", "never"]).1
}

/// Every evidence text of the primary findings, and of the Flight Recorder summary.
fn evidence_text(v: &Value) -> String {
    let mut parts = Vec::new();
    for f in v["findings"].as_array().into_iter().flatten() {
        if f["severity"] == "primary" {
            parts.push(f["title"].as_str().unwrap_or_default().to_owned());
            for e in f["evidence"].as_array().into_iter().flatten() {
                parts.push(e["text"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    parts.join("\n")
}

fn primary_ranks(v: &Value) -> Vec<Vec<u64>> {
    v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "primary")
        .map(|f| {
            f["ranks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .collect()
        })
        .collect()
}

fn finding_ids(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{} {}",
                f["id"].as_str().unwrap_or_default(),
                f["title"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn ranks(v: &Value) -> Vec<u32> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .filter_map(|r| u32::try_from(r).ok())
        .collect()
}

/// Unpacks a real capture; returns the guard and the case folder (dumps/, logs/,
/// flight-recorder/).
fn unpack(name: &str) -> (tempfile::TempDir, PathBuf) {
    let (dir, case) = support::captures::unpack_case(&real_gpu(), name);
    assert!(
        case.join("flight-recorder").is_dir(),
        "{name} holds no flight-recorder/"
    );
    (dir, case)
}

/// What `fr_trace` printed for one case: the block after its `$ python -m ...fr_trace NAME/...`
/// line.
fn fr_trace_says(name: &str) -> String {
    let text = std::fs::read_to_string(real_gpu().join("fr_trace.txt")).expect("fr_trace.txt");
    let start = text
        .find(&format!(" {name}/flight-recorder"))
        .unwrap_or_else(|| panic!("fr_trace.txt has no run on {name}"));
    let rest = &text[start..];
    let end = rest[1..].find("\n$ ").map_or(rest.len(), |e| e + 1);
    rest[..end].to_owned()
}

/// The ranks in `{1, 2}` after `label` in fr_trace's output.
fn fr_trace_set(block: &str, label: &str) -> Vec<u64> {
    let Some(at) = block.find(label) else {
        return Vec::new();
    };
    let rest = &block[at + label.len()..];
    let open = rest.find('{').expect("a set follows");
    let close = rest.find('}').expect("a set ends");
    rest[open + 1..close]
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect()
}

// ---- the small pickles of every format shape -------------------------------------------------

#[test]
fn every_format_version_is_read_and_judged() {
    // (folder, version written, ranks, what the Flight Recorder evidence must say)
    let cases = [
        ("v2.2", "2.2", vec![0, 1], "ranks disagree on the sizes of collective #3"),
        ("v2.4", "2.4", vec![0, 1], "ranks disagree on the dtypes of collective #2"),
        (
            "v2.10",
            "2.10",
            vec![0, 1, 2],
            "rank 2 last issued all_reduce #3 (Flight Recorder collective_seq_id; shim seq 2), completed, at train.py:50; ranks 0-1 wait in all_reduce #4 (Flight Recorder collective_seq_id; shim seq 3), scheduled, at train.py:50",
        ),
    ];
    for (folder, version, want_ranks, says) in cases {
        let dir = fixtures().join(folder);
        for r in &want_ranks {
            let p = dir.join(format!("rank_{r}"));
            let d = ncclshim_diagnose::flight_recorder::read_dump(&p, *r, folder.into())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(d.version, version, "{folder}");
            assert!(!d.entries.is_empty(), "{folder}: entries read");
            assert_eq!(d.groups[0].label(), "0:default_pg", "{folder}");
        }
        let (code, v, stderr) = report_json(&dir, &[]);
        assert_eq!(code, 1, "{folder}: a problem is found\n{v:#}\n{stderr}");
        let fr = &v["flight_recorder"];
        assert_eq!(ranks(&fr["ranks_with_dump"]), want_ranks, "{folder}");
        assert_eq!(ranks(&fr["ranks_without_ncclshim"]), want_ranks, "{folder}");
        let all: Vec<&str> = fr["evidence"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["text"].as_str())
            .collect();
        assert!(
            all.iter().any(|t| t.contains(says)),
            "{folder}: the Flight Recorder evidence says {says:?}:\n{all:#?}"
        );
        assert!(
            v["job"]["communicators"][0]["process_group"] == "0:default_pg",
            "{folder}: the communicator is named by its process group\n{v:#}"
        );
    }
}

#[test]
fn size_and_dtype_mismatches_reach_the_desync_rule() {
    // The stand-in ranks go through the same model and rules as the shim's: C19 names rank 1.
    for folder in ["v2.2", "v2.4"] {
        let (_, v, _) = report_json(&fixtures().join(folder), &[]);
        let c19: Vec<&Value> = v["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["catalog"] == "C19")
            .collect();
        assert!(
            c19.iter().any(|f| ranks(&f["ranks"]) == vec![1]),
            "{folder}: C19 names rank 1: {:#?}",
            finding_ids(&v)
        );
    }
}

#[test]
fn an_unknown_version_is_one_note_and_read_best_effort() {
    let (_, v, _) = report_json(&fixtures().join("unknown-version"), &[]);
    let notes: Vec<&str> = v["flight_recorder"]["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("\"3.0\""), "{notes:?}");
    assert_eq!(ranks(&v["flight_recorder"]["ranks_with_dump"]), vec![0]);
}

#[test]
fn corrupt_truncated_and_empty_dumps_are_one_line_each_and_never_stop_the_report() {
    let dir = fixtures().join("bad");
    let (code, v, _) = report_json(&dir, &[]);
    assert_eq!(code, 1, "the readable rank is still judged: {v:#}");
    let problems = v["problems"].as_array().expect("problems");
    let lines: Vec<(String, String)> = problems
        .iter()
        .map(|p| {
            (
                p["file"].as_str().unwrap_or_default().to_owned(),
                p["error"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    for (file, why) in &lines {
        assert!(!why.contains('\n'), "{file}: one line: {why}");
    }
    assert!(
        lines[0].1.contains("not a readable Flight Recorder dump"),
        "{lines:#?}"
    );
    assert!(lines[1].1.contains("truncated"), "{lines:#?}");
    assert!(lines[2].1.contains("empty"), "{lines:#?}");
    assert_eq!(ranks(&v["flight_recorder"]["ranks_with_dump"]), vec![3]);
    assert_eq!(
        ranks(&v["flight_recorder"]["ranks_without_dump"]),
        vec![0, 1, 2]
    );
    // The library never panics on any prefix of a real dump either.
    let whole = std::fs::read(fixtures().join("v2.10/rank_0")).expect("fixture");
    for n in 0..whole.len() {
        let r = ncclshim_diagnose::flight_recorder::parse(&whole[..n], 0, "x".into());
        assert!(
            r.is_err(),
            "a dump cut at {n} of {} bytes is refused",
            whole.len()
        );
    }
}

#[test]
fn the_prefix_option_reads_dumps_outside_the_job_directory() {
    let (_g, case) = unpack("mr-hang");
    let (_, v, _) = report_json(
        &case.join("dumps"),
        &[
            "--flight-recorder",
            case.join("flight-recorder/rank_").to_str().expect("utf-8"),
        ],
    );
    assert_eq!(
        ranks(&v["flight_recorder"]["ranks_with_dump"]),
        vec![0, 1, 2]
    );
    assert!(evidence_text(&v).contains("mr.py:50"), "{v:#}");
    // Without it, the dumps directory alone has no Flight Recorder dump.
    let (_, v, _) = report_json(&case.join("dumps"), &[]);
    assert!(v.get("flight_recorder").is_none(), "{v:#}");
}

// ---- the real captures, against fr_trace ------------------------------------------------------

#[test]
fn mr_hang_names_the_missing_rank_fr_trace_names_with_the_python_line() {
    let said = fr_trace_says("mr-hang");
    let missing = fr_trace_set(&said, "missing ranks:");
    assert_eq!(missing, vec![2], "fr_trace.txt: {said}");
    assert!(said.contains("sequence number: 11") && said.contains("mr.py:50"));
    let (_g, case) = unpack("mr-hang");
    let (code, v, _) = report_json(&case, &[]);
    assert_eq!(code, 1);
    assert_eq!(
        primary_ranks(&v),
        vec![missing.clone()],
        "{:#?}",
        finding_ids(&v)
    );
    let ev = evidence_text(&v);
    for want in [
        "rank 2 last issued all_reduce #10 (Flight Recorder collective_seq_id; shim seq 9), completed",
        "ranks 0-1 wait in all_reduce #11 (Flight Recorder collective_seq_id; shim seq 10), scheduled, at mr.py:50",
        "0:default_pg",
    ] {
        assert!(
            ev.contains(want),
            "the primary finding's evidence says {want:?}:\n{ev}"
        );
    }
    assert!(
        text_report(&case).contains("(0:default_pg)"),
        "communicators named"
    );
}

#[test]
fn mr_op_mismatch_names_the_culprit_fr_trace_names_with_both_lines() {
    let said = fr_trace_says("mr-op-mismatch");
    assert!(said.contains("Culprit rank 1"), "{said}");
    assert!(said.contains("'all_reduce' does not match found collective type: 'broadcast'"));
    let (_g, case) = unpack("mr-op-mismatch");
    let (_, v, _) = report_json(&case, &[]);
    assert_eq!(primary_ranks(&v)[0], vec![1], "{:#?}", finding_ids(&v));
    let ev = evidence_text(&v);
    for want in [
        "ranks disagree on the collective type of collective #6 (Flight Recorder collective_seq_id; shim seq 5)",
        "rank 0 issued all_reduce [[1024]] Float at mr.py:85",
        "rank 1 issued broadcast [[1024]] Float at mr.py:87",
    ] {
        assert!(
            ev.contains(want),
            "the primary finding's evidence says {want:?}:\n{ev}"
        );
    }
}

#[test]
fn mr_crash_does_better_than_fr_trace_where_a_dump_is_missing() {
    let said = fr_trace_says("mr-crash");
    assert!(said.contains("missed FR dumps from ranks ({1})"), "{said}");
    let (_g, case) = unpack("mr-crash");
    let (_, v, _) = report_json(&case, &[]);
    // fr_trace cannot decide; ncclshim names the rank from the shim's dump of it, and says
    // which rank has no Flight Recorder dump.
    assert_eq!(ranks(&v["flight_recorder"]["ranks_without_dump"]), vec![1]);
    assert_eq!(primary_ranks(&v)[0], vec![1], "{:#?}", finding_ids(&v));
    assert!(evidence_text(&v).contains("rank 0 waits in all_reduce #11 (Flight Recorder collective_seq_id; shim seq 10), scheduled, at mr.py:61"));
}

// ---- Flight Recorder dumps only ----------------------------------------------------------------

/// A job directory holding only the case's flight-recorder/ folder (times kept: `tar` keeps
/// them, and nothing here depends on them).
fn fr_only(name: &str) -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let (g, case) = unpack(name);
    let only = tempfile::tempdir().expect("a temporary directory");
    let to = only.path().join("flight-recorder");
    std::fs::create_dir(&to).expect("mkdir");
    for e in std::fs::read_dir(case.join("flight-recorder")).expect("list") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
    let dir = only.path().to_path_buf();
    (g, only, dir)
}

#[test]
fn flight_recorder_only_mr_hang_still_names_rank_2() {
    let (_g, _o, dir) = fr_only("mr-hang");
    let (code, v, _) = report_json(&dir, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(primary_ranks(&v), vec![vec![2]], "{:#?}", finding_ids(&v));
    assert_eq!(
        ranks(&v["flight_recorder"]["ranks_without_ncclshim"]),
        vec![0, 1, 2]
    );
    assert!(evidence_text(&v).contains("at mr.py:50"));
}

#[test]
fn flight_recorder_only_mr_op_mismatch_still_names_rank_1() {
    let (_g, _o, dir) = fr_only("mr-op-mismatch");
    let (code, v, _) = report_json(&dir, &[]);
    assert_eq!(code, 1, "{v:#}");
    let primary = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["severity"] == "primary")
        .expect("a primary finding");
    assert_eq!(primary["catalog"], "C19", "{:#?}", finding_ids(&v));
    assert_eq!(ranks(&primary["ranks"]), vec![1]);
    assert!(evidence_text(&v).contains("broadcast [[1024]] Float at mr.py:87"));
}

#[test]
fn flight_recorder_only_mr_crash_names_the_rank_without_a_dump() {
    let (_g, _o, dir) = fr_only("mr-crash");
    let (_, v, _) = report_json(&dir, &[]);
    assert_eq!(primary_ranks(&v), vec![vec![1]], "{:#?}", finding_ids(&v));
    assert_eq!(ranks(&v["flight_recorder"]["ranks_without_dump"]), vec![1]);
}

// ---- the trace ----------------------------------------------------------------------------------

/// `ncclshim trace` on a real capture with Flight Recorder dumps beside the shim's (issue 25):
/// the slices of a communicator name its process group, and each collective call carries the
/// Flight Recorder entry of the same collective (shim seq N is collective_seq_id N + 1) with the
/// Python stack that issued it. mr-hang: ranks 0-1 wait in all_reduce #11, issued at mr.py:50.
#[test]
fn the_trace_names_process_groups_and_carries_each_collectives_python_stack() {
    let (guard, case) = unpack("mr-hang");
    let trace_path = guard.path().join("trace.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("trace")
        .arg(&case)
        .arg("-o")
        .arg(&trace_path)
        .output()
        .expect("the ncclshim binary runs");
    assert!(out.status.success(), "{out:?}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&trace_path).unwrap()).expect("JSON");
    trace_validate::validate(&trace).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let all_reduces: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ncclAllReduce"))
        })
        .collect();
    assert!(
        !all_reduces.is_empty(),
        "the trace draws the all-reduce calls"
    );
    // Every rank's, rank 2's too (it left no Flight Recorder dump: named by the others').
    for e in &all_reduces {
        assert_eq!(e["args"]["process_group"], "0:default_pg", "{e}");
    }
    let with_entry: Vec<&&Value> = all_reduces
        .iter()
        .filter(|e| e["args"].get("flight_recorder").is_some())
        .collect();
    assert!(
        !with_entry.is_empty(),
        "calls carry their Flight Recorder entry"
    );
    for e in with_entry {
        let fr = &e["args"]["flight_recorder"];
        assert_eq!(
            fr["collective_seq_id"],
            e["args"]["seq"].as_i64().unwrap() + 1,
            "{e}"
        );
        assert_eq!(fr["profiling_name"], "nccl:all_reduce", "{e}");
    }
    let hung: Vec<&&Value> = all_reduces
        .iter()
        .filter(|e| e["args"]["seq"] == 10)
        .collect();
    assert_eq!(hung.len(), 2, "ranks 0-1 entered all_reduce #11: {hung:?}");
    for e in hung {
        let fr = &e["args"]["flight_recorder"];
        assert_eq!(fr["site"], "mr.py:50", "{e}");
        assert_eq!(fr["state"], "scheduled", "{e}");
        assert!(
            fr["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| { f["filename"].as_str().unwrap().ends_with("mr.py") && f["line"] == 50 }),
            "the Python stack: {e}"
        );
    }
}

/// The same with the Flight Recorder dumps outside the job directory: `trace --flight-recorder
/// PREFIX` joins them as `report --flight-recorder` does; without it the trace names no group.
#[test]
fn the_trace_reads_flight_recorder_dumps_from_a_prefix_of_their_own() {
    let (guard, case) = unpack("mr-hang");
    let elsewhere = guard.path().join("fr-elsewhere");
    std::fs::rename(case.join("flight-recorder"), &elsewhere).expect("move the dumps away");
    let prefix = std::fs::read_dir(&elsewhere)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find_map(|n| n.strip_suffix('0').map(str::to_owned))
        .expect("rank 0's dump names the prefix");
    let trace_of = |extra: &[std::ffi::OsString]| -> Vec<Value> {
        let path = guard.path().join("trace.json");
        let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
            .arg("trace")
            .arg(&case)
            .arg("-o")
            .arg(&path)
            .args(extra)
            .output()
            .expect("the ncclshim binary runs");
        assert!(out.status.success(), "{out:?}");
        let trace: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("JSON");
        trace_validate::validate(&trace).unwrap();
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("ncclAllReduce"))
            })
            .cloned()
            .collect()
    };
    let without = trace_of(&[]);
    assert!(!without.is_empty());
    assert!(
        without
            .iter()
            .all(|e| e["args"].get("process_group").is_none()),
        "no Flight Recorder dump in the job directory: no group names"
    );
    let with = trace_of(&["--flight-recorder".into(), elsewhere.join(&prefix).into()]);
    assert!(
        with.iter()
            .all(|e| e["args"]["process_group"] == "0:default_pg"),
        "{with:?}"
    );
    assert!(with
        .iter()
        .any(|e| e["args"]["flight_recorder"]["site"] == "mr.py:50"));
}

// ---- cost ------------------------------------------------------------------------------------

/// The cost of reading Flight Recorder dumps (BENCHMARKS.md): `FR_BENCH_DUMP=<a dump>
/// FR_BENCH_RANKS=<n> cargo test --release --test flight_recorder -- --ignored --nocapture
/// reading_cost`: reads the dump once, then `n` copies of it as one job (parallel read and the
/// per-group evidence), and prints the times. Measures; asserts nothing about time.
#[test]
#[ignore = "a measurement: run by hand with FR_BENCH_DUMP"]
fn reading_cost() {
    let Ok(dump) = std::env::var("FR_BENCH_DUMP") else {
        eprintln!("FR_BENCH_DUMP not set: nothing measured");
        return;
    };
    let ranks: u32 = std::env::var("FR_BENCH_RANKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    let bytes = std::fs::read(&dump).expect("FR_BENCH_DUMP is readable");
    let t = std::time::Instant::now();
    let one = ncclshim_diagnose::flight_recorder::parse(&bytes, 0, dump.clone()).expect("readable");
    eprintln!(
        "one dump ({} bytes, {} entries): {:.2} ms",
        bytes.len(),
        one.entries.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    for r in 0..ranks {
        std::fs::write(dir.path().join(format!("rank_{r}")), &bytes).expect("write");
    }
    let t = std::time::Instant::now();
    let listing = ncclshim_diagnose::load::list_dumps(dir.path()).expect("the directory lists");
    let fr = ncclshim_diagnose::flight_recorder::load(
        dir.path(),
        &ncclshim_diagnose::flight_recorder::Source::InJobDir,
        &listing,
    );
    let read = t.elapsed();
    let ev = ncclshim_diagnose::flight_recorder::join::evidence(&fr, &Default::default());
    eprintln!(
        "{ranks} dumps: found and read in {:.0} ms, evidence in {:.0} ms ({} lines, {} threads)",
        read.as_secs_f64() * 1e3,
        (t.elapsed() - read).as_secs_f64() * 1e3,
        ev.len(),
        rayon::current_num_threads()
    );
    assert_eq!(fr.dumps.len(), ranks as usize);
}
