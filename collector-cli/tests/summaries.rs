//! `ncclshim summarize` (issue 37): a summary holds what the report needs of its processes, so
//! the report on summaries is the report on the dumps they came from. Checked over every dump
//! fixture and every real GPU capture (the whole report JSON, byte for byte once parsed), split
//! by process into "nodes" that are summarized one by one and then as a summary of summaries,
//! and mixed with dumps; damaged summaries are one problem line each, never a stop.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `ncclshim summarize INPUTS -o OUT`: its stderr; panics when it fails.
fn summarize(inputs: &[&Path], out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("summarize")
        .args(inputs)
        .arg("-o")
        .arg(out)
        .output()
        .expect("ncclshim runs");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "summarize {inputs:?} failed: {stderr}");
    stderr
}

/// The report JSON of `dir` with the extra arguments, and its exit status.
fn report(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let (code, v, _) = support::cli::report_json(dir, extra);
    (code, v)
}

/// The Flight Recorder folder of a capture, when it has one.
fn flight_recorder_of(case: &Path) -> Option<PathBuf> {
    let fr = case.join("flight-recorder");
    fr.is_dir().then_some(fr)
}

/// What differs between the direct report of `dir` and the report on its summary, in words.
fn differences(dir: &Path) -> Option<String> {
    let out = tempfile::tempdir().unwrap();
    let summaries = out.path().join("summaries");
    std::fs::create_dir(&summaries).unwrap();
    summarize(&[dir], &summaries.join("node.ncclshim-summary"));
    let fr = flight_recorder_of(dir);
    let fr_arg = fr.as_ref().map(|p| p.display().to_string());
    let extra: Vec<&str> = match &fr_arg {
        Some(p) => vec!["--flight-recorder", p.as_str()],
        None => Vec::new(),
    };
    let (code_direct, mut direct) = report(dir, &[]);
    let (code_summary, mut summarized) = report(&summaries, &extra);
    // The Flight Recorder dumps are named from where they lie, not carried: the summary says
    // so in one problem line, which the direct read has no reason to say.
    if fr.is_some() {
        for v in [&mut direct, &mut summarized] {
            v.as_object_mut().unwrap().remove("problems");
        }
    }
    if code_direct == code_summary && direct == summarized {
        return None;
    }
    let a = serde_json::to_string_pretty(&direct).unwrap();
    let b = serde_json::to_string_pretty(&summarized).unwrap();
    let first = a
        .lines()
        .zip(b.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("line {i}: {x} / {y}"))
        .unwrap_or_else(|| "lengths differ".to_string());
    Some(format!(
        "{}: exit {code_direct} vs {code_summary}; first difference {first}",
        dir.display()
    ))
}

/// Every real GPU capture unpacked: (guard, the case's folder).
fn real_gpu_cases() -> Vec<(tempfile::TempDir, PathBuf)> {
    let mut out = Vec::new();
    for (capture, names) in support::captures::real_gpu_case_names() {
        for name in names {
            out.push(support::captures::unpack_case(&capture, &name));
        }
    }
    out
}

#[test]
fn every_fixture_reports_the_same_from_its_summary() {
    let diffs: Vec<String> = support::captures::fixture_dirs()
        .iter()
        .filter_map(|d| differences(d))
        .collect();
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn every_real_gpu_capture_reports_the_same_from_its_summary() {
    let cases = real_gpu_cases();
    assert!(cases.len() >= 14, "only {} real GPU captures", cases.len());
    let diffs: Vec<String> = cases.iter().filter_map(|(_, d)| differences(d)).collect();
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// A capture's dumps split by process into two "nodes": node-a holds the first process's files,
/// node-b the others'.
fn split_into_nodes(dumps: &Path, into: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (into.join("node-a"), into.join("node-b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dumps)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".ncclshim"))
        .collect();
    files.sort();
    // `<host>.<pid>.<start>.<tag>.ncclshim`: a process's files share host, pid and start.
    let process = |p: &Path| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        n.split('.').take(3).collect::<Vec<_>>().join(".")
    };
    let first = process(&files[0]);
    for f in &files {
        let to = if process(f) == first { &a } else { &b };
        std::fs::copy(f, to.join(f.file_name().unwrap())).unwrap();
    }
    (a, b)
}

/// Node summaries, a summary of those summaries, and a summary beside another node's dumps all
/// give the report on the whole job's dumps.
#[test]
fn node_summaries_compose_and_mix_with_dumps() {
    let mut checked = 0;
    for (_guard, case) in real_gpu_cases() {
        let dumps = case.join("dumps");
        if flight_recorder_of(&case).is_some() || !dumps.is_dir() {
            continue;
        }
        let work = tempfile::tempdir().unwrap();
        let whole = work.path().join("whole");
        let (a, b) = split_into_nodes(&dumps, &whole);
        if std::fs::read_dir(&b).unwrap().count() == 0 {
            continue;
        }
        let (code, direct) = report(&whole, &[]);

        let per_node = work.path().join("per-node");
        std::fs::create_dir(&per_node).unwrap();
        summarize(&[&a], &per_node.join("a.ncclshim-summary"));
        summarize(&[&b], &per_node.join("b.ncclshim-summary"));
        assert_eq!(report(&per_node, &[]), (code, direct.clone()), "{case:?}");

        let tree = work.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        summarize(&[&per_node], &tree.join("rack.ncclshim-summary"));
        assert_eq!(report(&tree, &[]), (code, direct.clone()), "{case:?}");

        // One node summarized, the other's dumps as they are.
        let mixed = work.path().join("mixed");
        std::fs::create_dir(&mixed).unwrap();
        summarize(&[&a], &mixed.join("a.ncclshim-summary"));
        let b_copy = mixed.join("node-b");
        std::fs::create_dir(&b_copy).unwrap();
        for f in std::fs::read_dir(&b).unwrap().flatten() {
            std::fs::copy(f.path(), b_copy.join(f.file_name())).unwrap();
        }
        assert_eq!(report(&mixed, &[]), (code, direct), "{case:?}");
        checked += 1;
    }
    assert!(
        checked >= 3,
        "only {checked} multi-process captures checked"
    );
}

/// A summary written into the job directory it summarizes: the report reads each process once,
/// from its dumps, and says so.
#[test]
fn a_summary_beside_its_own_dumps_is_not_counted_twice() {
    let (_guard, case) = real_gpu_cases().into_iter().next().unwrap();
    let dumps = case.join("dumps");
    let (code, direct) = report(&dumps, &[]);
    summarize(&[&dumps], &dumps.join("here.ncclshim-summary"));
    let (code2, mut both) = report(&dumps, &[]);
    let problems = both
        .as_object_mut()
        .unwrap()
        .remove("problems")
        .unwrap_or_default();
    let mut direct = direct;
    direct.as_object_mut().unwrap().remove("problems");
    assert_eq!((code2, both), (code, direct));
    assert!(
        problems.to_string().contains("taken from the dumps"),
        "{problems}"
    );
}

/// Damaged or foreign summaries are each one problem line; the readable rest is reported.
#[test]
fn damaged_summaries_are_one_line_each() {
    let (_guard, case) = real_gpu_cases().into_iter().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.ncclshim-summary");
    summarize(&[&case.join("dumps")], &good);
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(
        dir.path().join("cut.ncclshim-summary"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    std::fs::write(
        dir.path().join("garbage.ncclshim-summary"),
        b"not gzip at all",
    )
    .unwrap();
    let foreign = {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(br#"{"format":"ncclshim-summary","version":[99,0]}"#)
            .unwrap();
        gz.finish().unwrap()
    };
    std::fs::write(dir.path().join("newer.ncclshim-summary"), foreign).unwrap();
    let (_, v) = report(dir.path(), &[]);
    let problems = v["problems"].as_array().cloned().unwrap_or_default();
    let line = |name: &str| {
        problems
            .iter()
            .filter(|p| p["file"] == name)
            .map(|p| p["error"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(line("cut.ncclshim-summary").len(), 1, "{problems:?}");
    assert!(line("garbage.ncclshim-summary")[0].contains("not a readable summary"));
    assert!(line("newer.ncclshim-summary")[0].contains("version 99.0"));
    assert!(
        v["findings"].as_array().is_some_and(|f| !f.is_empty()),
        "the good summary is still reported"
    );
}

/// A summary file named alone is reported as the directory holding only it (it said "not a
/// directory" before).
#[test]
fn a_summary_file_is_reported_when_named_alone() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/synthetic/c19-desync");
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("node.ncclshim-summary");
    summarize(&[&case], &file);
    let (code_dir, in_dir) = report(out.path(), &[]);
    let (code_file, alone) = report(&file, &[]);
    assert_eq!((code_file, &alone), (code_dir, &in_dir));
    assert!(
        alone["findings"].as_array().is_some_and(|f| !f.is_empty()),
        "{alone}"
    );
}

/// Summaries of version 1 (gzip JSON, tests/fixtures/summaries-v1, written by the ncclshim
/// before version 2) are still read: each reports as the dumps it was made from.
#[test]
fn version_1_summaries_report_as_their_dumps() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    for (summary, dumps) in [
        ("c19-desync", "synthetic/c19-desync"),
        ("c05-gdr-peermem", "synthetic/c05-gdr-peermem"),
        ("socket-ifname-cu12", "real/socket-ifname-cu12"),
    ] {
        let file = root.join(format!("summaries-v1/{summary}.ncclshim-summary"));
        let head = std::fs::read(&file).unwrap();
        assert_eq!(
            head[..2],
            [0x1f, 0x8b],
            "{summary}: a gzip (version 1) summary"
        );
        assert_eq!(
            report(&file, &[]),
            report(&root.join(dumps), &[]),
            "{summary}"
        );
    }
}

/// `report --json` of `path` (with `extra` arguments) keeping `keep` operations a thread and a
/// communicator, as a job of 32,768 x 256 / `keep` parts would; `problems` left out when
/// `drop_problems` (a summary says that Flight Recorder dumps are not carried).
fn report_keeping(
    path: &Path,
    extra: &[String],
    keep: usize,
    drop_problems: bool,
) -> (Option<i32>, Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["report", "--json"])
        .arg(path)
        .args(extra)
        .env("NCCLSHIM_KEEP_OPERATIONS", keep.to_string())
        .output()
        .expect("ncclshim runs");
    let mut v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: not JSON ({e}): {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    if drop_problems {
        v.as_object_mut().unwrap().remove("problems");
    }
    (o.status.code(), v)
}

/// A very large job keeps fewer operations a process; summaries (made keeping 256) are then
/// compacted to the same as the dumps are, so the report on them is still the report on the
/// dumps. Checked with 2 kept over every fixture and real GPU capture: that drops a finding of
/// some (a send/receive size mismatch needs the operations), so a summary left at 256 would
/// differ there.
#[test]
fn a_smaller_keep_reports_the_same_from_summaries_and_from_dumps() {
    let cases = real_gpu_cases();
    let dirs: Vec<PathBuf> = support::captures::fixture_dirs()
        .into_iter()
        .chain(cases.iter().map(|(_, d)| d.clone()))
        .collect();
    let mut diffs = Vec::new();
    let mut keep_matters = 0;
    for dir in dirs {
        let out = tempfile::tempdir().unwrap();
        summarize(&[&dir], &out.path().join("node.ncclshim-summary"));
        let fr = flight_recorder_of(&dir);
        let extra: Vec<String> = fr
            .iter()
            .flat_map(|p| ["--flight-recorder".to_string(), p.display().to_string()])
            .collect();
        let direct = report_keeping(&dir, &[], 2, fr.is_some());
        if direct != report_keeping(&dir, &[], 256, fr.is_some()) {
            keep_matters += 1;
        }
        if report_keeping(out.path(), &extra, 2, fr.is_some()) != direct {
            diffs.push(dir.display().to_string());
        }
    }
    assert!(diffs.is_empty(), "{diffs:?}");
    assert!(
        keep_matters > 0,
        "no capture's report depends on the operations kept"
    );
}
