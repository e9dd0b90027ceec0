//! The `ncclshim` binary end to end: `dump` JSON lines, `report` exit codes, and a directory of
//! corrupt, truncated, empty, foreign and future-version files that must give a report plus one
//! clear line per bad file, never a crash.

use std::path::Path;
use std::process::Command;

fn ncclshim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ncclshim"))
}

fn first_dump(dir: &Path) -> std::path::PathBuf {
    collector_cli::load::find_dumps(dir).unwrap().remove(0)
}

#[test]
fn dump_prints_header_records_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    collector_cli::scenarios::c01(dir.path()).unwrap();
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
    collector_cli::scenarios::healthy(dir.path()).unwrap();
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

    let out = ncclshim()
        .args(["report", "--json"])
        .arg(d)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 5);
    assert_eq!(v["format_version"], collector_cli::report::FORMAT_VERSION);
    assert!(v["job"]["processes"].as_u64().unwrap() >= 4);
}

#[test]
fn report_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    collector_cli::scenarios::c01(dir.path()).unwrap();
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
    collector_cli::scenarios::c19(dir.path()).unwrap();
    // The profiler part of rank 0 is the `.1` file (same identity as its shim part).
    let prof = collector_cli::load::find_dumps(dir.path())
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
    collector_cli::scenarios::c20(src.path()).unwrap();
    let files = collector_cli::load::find_dumps(src.path()).unwrap();
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
        let r = collector_cli::analyze_dir(dir.path(), None).unwrap();
        let _ = r.to_text(true);
        serde_json::to_string(&r).unwrap();
    }
}
