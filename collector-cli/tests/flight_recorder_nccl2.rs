//! PyTorch 2.15's `nccl2` and `nccl-lazy` backends write their Flight Recorder dumps through
//! c10d's FlightRecorderHook: the same file and pickle as the legacy backend, but other
//! profiling names ("nccl2:send", no peers), no "started" state, `split` numbered among the
//! collectives, other NCCL calls per operation, and (nccl-lazy) p2p entries that can be
//! missing. The same job must get the same verdict whichever backend wrote its dumps:
//! - the real GPU captures (the shim's real dumps) with their legacy Flight Recorder dumps, and
//!   with the nccl2 dumps of the same job (`tests/fixtures/flight-recorder/nccl2/`, written by
//!   its `make.py` from the legacy ones) in their place: the same findings, remedies and
//!   Flight Recorder lines;
//! - the Flight Recorder dumps alone (ranks without the shim), legacy against nccl2;
//! - a p2p size mismatch in a subgroup (global ranks 2-3 of 4), as legacy, nccl2 and
//!   nccl-lazy record it: the same verdict, naming the global ranks;
//! - nccl-lazy's missing p2p entries: said as missing, never a mismatch.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use support::cli::report_json;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flight-recorder")
}

/// The capture folder of each real case the nccl2 fixtures mirror.
fn capture_of(case: &str) -> PathBuf {
    let day = match case {
        "p2p-size-mismatch" => "2026-11-27-h100",
        _ => "2026-11-27",
    };
    support::captures::real_gpu_root().join(day)
}

/// What must not depend on the backend that wrote the Flight Recorder dumps: the exit status,
/// every finding that is not advisory (id, role, catalog case, title, ranks, remedy,
/// confidence), and what the Flight Recorder summary says about ranks and dumps.
fn verdict(code: i32, v: &Value) -> Value {
    let findings: Vec<Value> = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] != "advisory")
        .map(|f| {
            serde_json::json!({
                "id": f["id"], "severity": f["severity"], "catalog": f["catalog"],
                "title": f["title"], "ranks": f["ranks"], "remedy": f["remedy"],
                "confidence": f["confidence"],
            })
        })
        .collect();
    let fr = &v["flight_recorder"];
    serde_json::json!({
        "exit": code,
        "findings": findings,
        "ranks_with_dump": fr["ranks_with_dump"],
        "ranks_without_dump": fr["ranks_without_dump"],
        "ranks_without_ncclshim": fr["ranks_without_ncclshim"],
    })
}

/// `v` as text with every `0x` hash blanked.
fn without_hashes(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at + 2]);
        rest = rest[at + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('#');
    }
    out.push_str(rest);
    out
}

/// The Flight Recorder's own lines of the report.
fn fr_lines(v: &Value) -> Vec<String> {
    v["flight_recorder"]["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .collect()
}

/// Puts the dumps of fixture folder `from` in `to` in place of what it held, each file with the
/// modification time of the one it replaces (PyTorch writes a dump once, when it dumps; the
/// report judges a dump of the job directory by that time).
fn replace_dumps(from: &Path, to: &Path) {
    let mut mtime = None;
    if to.is_dir() {
        for e in std::fs::read_dir(to).expect("list") {
            let p = e.expect("entry").path();
            mtime = mtime.or_else(|| std::fs::metadata(&p).and_then(|m| m.modified()).ok());
            std::fs::remove_file(&p).expect("remove");
        }
    } else {
        std::fs::create_dir_all(to).expect("mkdir");
    }
    for e in std::fs::read_dir(from).expect("list") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        std::fs::copy(e.path(), &dest).expect("copy");
        if let Some(t) = mtime {
            let f = std::fs::File::options()
                .write(true)
                .open(&dest)
                .expect("open");
            f.set_modified(t).expect("set the time");
        }
    }
}

/// The report of real capture `case` with its legacy dumps, and with `backend`'s in their place.
fn both_reports(case: &str, backend: &str) -> ((i32, Value), (i32, Value)) {
    let (_g, dir) = support::captures::unpack_case(&capture_of(case), case);
    let (code, legacy, _) = report_json(&dir, &[]);
    replace_dumps(
        &fixtures().join(backend).join(case),
        &dir.join("flight-recorder"),
    );
    let (code2, other, _) = report_json(&dir, &[]);
    ((code, legacy), (code2, other))
}

#[test]
fn nccl2_dumps_beside_the_real_shims_give_the_legacy_verdict() {
    for case in ["mr-hang", "mr-crash", "p2p-size-mismatch"] {
        let ((code, legacy), (code2, nccl2)) = both_reports(case, "nccl2");
        assert_eq!(
            verdict(code, &legacy),
            verdict(code2, &nccl2),
            "{case}: legacy (left) and nccl2 (right) reports differ"
        );
        assert!(
            !legacy["findings"].as_array().expect("findings").is_empty(),
            "{case}: a failed job has findings"
        );
        // The same collectives at the same shim numbers: the same lines, word for word.
        assert_eq!(fr_lines(&legacy), fr_lines(&nccl2), "{case}");
    }
}

#[test]
fn nccl2_hang_names_the_shims_number_of_the_waited_collective() {
    let ((_, _), (_, nccl2)) = both_reports("mr-hang", "nccl2");
    let lines = fr_lines(&nccl2).join("\n");
    assert!(
        lines.contains(
            "ranks 0-1 wait in all_reduce #11 (Flight Recorder collective_seq_id; shim seq 10), scheduled, at mr.py:50"
        ),
        "{lines}"
    );
}

/// A job directory holding only the dumps of fixture folder `backend/case`.
fn fr_only(backend: &str, case: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fr = dir.path().join("flight-recorder");
    replace_dumps(&fixtures().join(backend).join(case), &fr);
    let path = dir.path().to_path_buf();
    (dir, path)
}

/// The legacy dumps of a real capture alone (ranks without the shim).
fn legacy_fr_only(case: &str) -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let (g, dir) = support::captures::unpack_case(&capture_of(case), case);
    let only = tempfile::tempdir().expect("a temporary directory");
    replace_dumps(
        &dir.join("flight-recorder"),
        &only.path().join("flight-recorder"),
    );
    let path = only.path().to_path_buf();
    (g, only, path)
}

#[test]
fn nccl2_dumps_alone_give_the_legacy_verdict() {
    for case in ["mr-hang", "mr-crash", "p2p-size-mismatch"] {
        let (_g, _o, legacy_dir) = legacy_fr_only(case);
        let (code, legacy, _) = report_json(&legacy_dir, &[]);
        let (_n, nccl2_dir) = fr_only("nccl2", case);
        let (code2, nccl2, _) = report_json(&nccl2_dir, &[]);
        assert_eq!(
            verdict(code, &legacy),
            verdict(code2, &nccl2),
            "{case}: legacy (left) and nccl2 (right) reports differ"
        );
        assert_eq!(fr_lines(&legacy), fr_lines(&nccl2), "{case}");
    }
}

/// The finding of id `id`.
fn finding<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("a {id} finding: {v:#}"))
}

#[test]
fn a_p2p_mismatch_in_a_subgroup_is_the_same_verdict_in_global_ranks_from_every_backend() {
    let (_l, dir) = fr_only("legacy", "p2p-subgroup");
    let (code, legacy, _) = report_json(&dir, &[]);
    assert_eq!(code, 1, "{legacy:#}");
    let p2p = finding(&legacy, "p2p-size-mismatch");
    let title = p2p["title"].as_str().expect("a title");
    assert!(
        title.contains("rank 2 sends count=4096") && title.contains("to rank 3"),
        "global ranks 2 and 3, not the group's 0 and 1: {title}"
    );
    assert_eq!(p2p["ranks"], serde_json::json!([3]), "{p2p:#}");
    let unpaired = finding(&legacy, "unpaired-p2p")["evidence"][0]["text"].clone();
    assert!(
        unpaired
            .as_str()
            .is_some_and(|t| t.contains("rank 2 posted 1 ncclSend to rank 3")),
        "{unpaired}"
    );
    for backend in ["nccl2", "nccl-lazy"] {
        let (_d, dir) = fr_only(backend, "p2p-subgroup");
        let (code2, other, _) = report_json(&dir, &[]);
        assert_eq!(
            verdict(code, &legacy),
            verdict(code2, &other),
            "{backend}: legacy (left) and {backend} (right) reports differ"
        );
        assert_eq!(
            finding(&other, "p2p-size-mismatch")["title"],
            title,
            "{backend}"
        );
    }
}

#[test]
fn missing_nccl_lazy_p2p_entries_are_said_as_missing_never_a_mismatch() {
    let (_d, dir) = fr_only("nccl-lazy", "missing-p2p");
    let (_, v, _) = report_json(&dir, &[]);
    let ids: Vec<&str> = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(
        !ids.iter()
            .any(|i| i.contains("p2p") || i.contains("desync")),
        "{ids:?}"
    );
    let lines = fr_lines(&v).join("\n");
    assert!(
        lines.contains("rank 2's dump holds 2 sends to rank 3, rank 3's 1 receives from rank 2")
            && lines.contains("not a mismatch"),
        "{lines}"
    );
}

/// torchcomms' own recorder writes the legacy prefix ("nccl:all_reduce") with one number over
/// every communicator of the process from 0, rank lists without brackets and no stacks: read
/// as such, the same job gets the same verdict, and its numbers are the group's from 1.
#[test]
fn torchcomms_dumps_give_the_legacy_verdict_with_or_without_the_shim() {
    for case in ["mr-hang", "mr-crash", "p2p-size-mismatch"] {
        let ((code, legacy), (code2, tc)) = both_reports(case, "torchcomms");
        assert_eq!(
            verdict(code, &legacy),
            verdict(code2, &tc),
            "{case}: legacy (left) and torchcomms (right) reports differ"
        );
        let (_g, _o, legacy_dir) = legacy_fr_only(case);
        let (code, legacy, _) = report_json(&legacy_dir, &[]);
        let (_t, tc_dir) = fr_only("torchcomms", case);
        let (code2, tc, _) = report_json(&tc_dir, &[]);
        assert_eq!(
            verdict(code, &legacy)["exit"],
            verdict(code2, &tc)["exit"],
            "{case}"
        );
        // Alone, a group's communicator is named from the group's name ("0" there,
        // "main_comm" here): the same verdict on another hash.
        assert_eq!(
            without_hashes(&verdict(code, &legacy)["findings"]),
            without_hashes(&verdict(code2, &tc)["findings"]),
            "{case}: dumps alone, legacy (left) and torchcomms (right)"
        );
    }
    let (_t, dir) = fr_only("torchcomms", "mr-hang");
    let (_, v, _) = report_json(&dir, &[]);
    let lines = fr_lines(&v).join("\n");
    assert!(
        lines.contains("process group main_comm:ncclx")
            && lines.contains("ranks 0-1 wait in all_reduce #11 (Flight Recorder collective_seq_id; shim seq 10), scheduled"),
        "{lines}"
    );
}
