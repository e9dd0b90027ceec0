//! The `ncclshim` binary end to end: `dump` JSON lines, `report` exit codes, and a directory of
//! corrupt, truncated, empty, foreign and future-version files that must give a report plus one
//! clear line per bad file, never a crash.

mod support;

use std::path::Path;
use std::process::Command;

fn ncclshim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ncclshim"))
}

fn first_dump(dir: &Path) -> std::path::PathBuf {
    ncclshim_diagnose::load::find_dumps(dir).unwrap().remove(0)
}

#[test]
fn dump_prints_header_records_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::c01(dir.path()).unwrap();
    let out = ncclshim()
        .arg("dump")
        .arg(first_dump(dir.path()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    let header = &lines[0]["header"];
    assert_eq!(header["hostname"], "h800-a");
    assert_eq!(header["writer_kind"], "synthetic");
    assert!(header["clock"]["realtime_ns"].as_u64().unwrap() > 0);
    let summary = &lines.last().unwrap()["summary"];
    let records: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l.get("call").is_some()).collect();
    assert_eq!(summary["records"].as_u64().unwrap() as usize, records.len());
    let init = records
        .iter()
        .find(|r| r["call"] == "ncclCommInitRank")
        .unwrap();
    assert_eq!(init["rc"], 5);
    assert_eq!(init["rc_name"], "ncclInvalidUsage");
    assert_eq!(init["args"]["nranks"], 2);
    assert_eq!(init["blob"]["kind"], "error_text");
    assert_eq!(init["blob"]["text"], "Error: network IB not found.");
    let env = records
        .iter()
        .rev()
        .find(|r| r["blob"]["kind"] == "environment")
        .unwrap();
    assert_eq!(env["blob"]["json"]["NCCL_NET"], "IB");
}

#[test]
fn dump_of_a_bad_file_exits_2_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.ncclshim");
    std::fs::write(
        &f,
        b"hello, I am not a dump at all, but I am long enough? no.",
    )
    .unwrap();
    let out = ncclshim().arg("dump").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("x.ncclshim"), "{err}");
    let out = ncclshim()
        .arg("dump")
        .arg(dir.path().join("nope.ncclshim"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn report_survives_every_kind_of_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::healthy(dir.path()).unwrap();
    let good = std::fs::read(first_dump(dir.path())).unwrap();
    let d = dir.path();
    std::fs::write(d.join("empty.ncclshim"), b"").unwrap();
    std::fs::write(d.join("foreign.ncclshim"), vec![b'#'; 8192]).unwrap();
    std::fs::write(d.join("truncated.ncclshim"), &good[..100]).unwrap();
    let mut future = good.clone();
    future[8..10].copy_from_slice(&99u16.to_le_bytes());
    std::fs::write(d.join("future.ncclshim"), &future).unwrap();
    let mut corrupt = good.clone();
    corrupt[216..220].copy_from_slice(&0xffff_ffffu32.to_le_bytes()); // ring count
    std::fs::write(d.join("corrupt.ncclshim"), &corrupt).unwrap();
    // Half a file is still readable: a warning, not a problem.
    std::fs::write(d.join("half.ncclshim"), &good[..good.len() / 2]).unwrap();

    let out = ncclshim()
        .args(["report", "--color", "never"])
        .arg(d)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    for bad in ["empty", "foreign", "truncated", "future", "corrupt"] {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(&format!("{bad}.ncclshim:")))
            .collect();
        assert_eq!(lines.len(), 1, "{bad}: {text}");
    }
    assert!(text.contains("5 files could not be read"), "{text}");
    assert!(text.contains("newer than this reader"), "{text}");
    // The half file was read, and what it lost is a gap in the evidence, not silence.
    let gaps = text
        .split("Evidence gaps")
        .nth(1)
        .unwrap_or_else(|| panic!("no evidence gaps: {text}"));
    assert!(
        gaps.lines()
            .any(|l| l.contains("half.ncclshim is damaged: file truncated")),
        "{text}"
    );
    assert!(
        text.contains("No problem found in the 5 dumps that could be read (5 files could not"),
        "{text}"
    );

    let out = ncclshim()
        .args(["report", "--json"])
        .arg(d)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    support::schema::check_report(&v);
    assert_eq!(v["problems"].as_array().unwrap().len(), 5);
    assert_eq!(
        v["format_version"],
        ncclshim_diagnose::report::FORMAT_VERSION
    );
    assert!(v["job"]["processes"].as_u64().unwrap() >= 4);
    assert!(
        v["evidence_gaps"].as_array().unwrap().iter().any(|g| {
            g["values"]["gap"] == "damaged_file" && g["values"]["file"] == "half.ncclshim"
        }),
        "{v:#}"
    );
}

/// A `--json` run that cannot make a report prints an error object (kind, message, path) on
/// stdout with exit status 2, and the same message on stderr; never "No problem found".
#[test]
fn a_failed_json_run_prints_an_error_object() {
    let empty = tempfile::tempdir().unwrap();
    let only_bad = tempfile::tempdir().unwrap();
    std::fs::write(only_bad.path().join("zero.ncclshim"), vec![0u8; 8192]).unwrap();
    std::fs::write(only_bad.path().join("foreign.ncclshim"), vec![b'#'; 8192]).unwrap();
    let missing = empty.path().join("no-such-dir");
    for (dir, kind) in [
        (missing.as_path(), "not_a_directory"),
        (empty.path(), "no_dumps"),
        (only_bad.path(), "no_readable_dumps"),
    ] {
        let out = ncclshim()
            .args(["report", "--json"])
            .arg(dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{kind}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{kind}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        support::schema::check_report(&v);
        assert_eq!(v["error"]["kind"], kind, "{v:#}");
        assert_eq!(v["error"]["path"], dir.display().to_string());
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(message),
            "{kind}: stderr says the same"
        );
        if kind == "no_readable_dumps" {
            assert_eq!(v["error"]["problems"].as_array().unwrap().len(), 2, "{v:#}");
        }
        // The text form: one error, no report.
        let out = ncclshim().arg("report").arg(dir).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("No problem found"), "{kind}: {text}");
    }
}

/// The contract check can fail: a report in the old shape (evidence as lines, processes as
/// `host pid N` strings) is rejected, and so is a field the schema does not document.
#[test]
fn the_schema_rejects_what_it_does_not_describe() {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::c20(dir.path()).unwrap();
    let r = ncclshim_diagnose::analyze_dir(dir.path(), None).unwrap();
    let good = support::schema::report_json(&r);
    let schema = support::schema::schema("report.schema.json");
    let v = jsonschema::draft202012::new(&schema).unwrap();
    assert!(v.is_valid(&good));
    let mut old = good.clone();
    old["findings"][0]["evidence"] = serde_json::json!(["rank 2 (node-b pid 10002): gone"]);
    assert!(!v.is_valid(&old));
    let mut old = good.clone();
    old["findings"][0]["processes"] = serde_json::json!(["node-b pid 10002"]);
    assert!(!v.is_valid(&old));
    let mut extra = good;
    extra["findings"][0]["undocumented"] = serde_json::json!(1);
    assert!(!v.is_valid(&extra));
}

#[test]
fn stall_after_takes_a_duration() {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::healthy(dir.path()).unwrap();
    for ok in ["30s", "5m", "1m30s", "500ms", "45"] {
        let out = ncclshim()
            .args(["report", "--stall-after", ok])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{ok}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = ncclshim()
        .args(["report", "--stall-after", "soon"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stall-after"));
}

#[test]
fn report_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::c01(dir.path()).unwrap();
    let out = ncclshim()
        .args(["report", "--color", "always"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\u{1b}["),
        "colors when asked"
    );
    let empty = tempfile::tempdir().unwrap();
    let out = ncclshim().arg("report").arg(empty.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no *.ncclshim"));
    let only_bad = tempfile::tempdir().unwrap();
    std::fs::write(only_bad.path().join("a.ncclshim"), b"").unwrap();
    let out = ncclshim()
        .arg("report")
        .arg(only_bad.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn dump_names_profiler_codes() {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::c19(dir.path()).unwrap();
    // The profiler part of rank 0 is the `.1` file (same identity as its shim part).
    let prof = ncclshim_diagnose::load::find_dumps(dir.path())
        .unwrap()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".ncclshim.1"))
        .unwrap();
    let out = ncclshim().arg("dump").arg(&prof).output().unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let coll = lines
        .iter()
        .find(|l| l["call"] == "Coll" && l["kind"] == "prof_start")
        .unwrap();
    assert_eq!(coll["names"]["func"], "AllReduce");
    assert_eq!(coll["names"]["datatype"], "ncclFloat32");
    let r = coll["ref"].as_u64().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "prof_stop" && l["args"]["start_ref"] == r),
        "a stop names its start"
    );
}

/// Scrambled record and blob bytes (valid header, so the reader gets past it) must never make the
/// analysis panic: every byte of the ring area is fair game for a corrupt file.
#[test]
fn analysis_never_panics_on_scrambled_records() {
    let src = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::c20(src.path()).unwrap();
    let files = ncclshim_diagnose::load::find_dumps(src.path()).unwrap();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        for f in &files {
            let mut bytes = std::fs::read(f).unwrap();
            // Past the header page: ring directory, slots and arena.
            for _ in 0..200 + round * 100 {
                let i = 4096 + (next() as usize) % (bytes.len() - 4096);
                bytes[i] = next() as u8;
            }
            std::fs::write(dir.path().join(f.file_name().unwrap()), &bytes).unwrap();
        }
        let r = ncclshim_diagnose::analyze_dir(dir.path(), None).unwrap();
        let _ = r.to_text(true);
        support::schema::report_json(&r);
    }
}
