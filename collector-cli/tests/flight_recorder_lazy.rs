//! Reading only the Flight Recorder dumps the report needs (`flight_recorder/lazy.rs`), through
//! the real `ncclshim report`: an 80-rank shim job (`scenarios::scale_job`: rank 40 dies inside
//! all-reduce #12, the others see the connection reset and exit) with a Flight Recorder dump
//! per rank (`tests/fixtures/flight-recorder/scale/`: rank 40's never completes #12). Most
//! dumps are only listed, and the report is the one every dump read gives
//! (`NCCLSHIM_FLIGHT_RECORDER_READ_ALL`).

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const RANKS: usize = 80;
const VICTIM: usize = RANKS / 2;

/// `ncclshim report --json DIR --flight-recorder FR/rank_`, every dump read when `read_all`.
fn report(job: &Path, fr: &Path, read_all: bool) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
    cmd.args(["report", "--json"])
        .arg(job)
        .arg("--flight-recorder")
        .arg(fr.join("rank_"));
    if read_all {
        cmd.env("NCCLSHIM_FLIGHT_RECORDER_READ_ALL", "1");
    } else {
        cmd.env_remove("NCCLSHIM_FLIGHT_RECORDER_READ_ALL");
    }
    let out = cmd.output().expect("the ncclshim binary runs");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report --json is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    support::schema::check_report(&v);
    v
}

/// What the report concludes: its findings (id, ranks, evidence lines) and the Flight
/// Recorder's ranks and evidence lines.
fn verdict(v: &Value) -> Value {
    let fr = &v["flight_recorder"];
    let findings: Vec<Value> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let lines: Vec<&Value> = f["evidence"]
                .as_array()
                .expect("evidence")
                .iter()
                .map(|e| &e["text"])
                .collect();
            serde_json::json!({"id": f["id"], "ranks": f["ranks"], "evidence": lines})
        })
        .collect();
    let fr_lines: Vec<&Value> = fr["evidence"]
        .as_array()
        .expect("flight_recorder evidence")
        .iter()
        .map(|e| &e["text"])
        .collect();
    serde_json::json!({
        "findings": findings,
        "communicators": v["job"]["communicators"],
        "ranks_with_dump": fr["ranks_with_dump"],
        "ranks_without_dump": fr["ranks_without_dump"],
        "ranks_without_ncclshim": fr["ranks_without_ncclshim"],
        "process_groups": fr["process_groups"],
        "fr_evidence": fr_lines,
    })
}

#[test]
fn only_the_dumps_the_report_needs_are_read_and_the_verdict_is_the_same() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let job = tmp.path().join("job");
    let sizes = ncclshim_fixtures::scenarios::ScaleSizes {
        colls: 12,
        shim_slots: 64,
        prof_slots: 0,
    };
    ncclshim_fixtures::scenarios::scale_job(&job, RANKS, sizes).expect("the job is written");
    let fr = tmp.path().join("fr");
    std::fs::create_dir(&fr).expect("fr dir");
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flight-recorder/scale");
    for rank in 0..RANKS {
        let from = fixtures.join(if rank == VICTIM { "hung" } else { "completed" });
        std::fs::copy(&from, fr.join(format!("rank_{rank}"))).expect("copy a dump");
    }

    let lazy = report(&job, &fr, false);
    let all = report(&job, &fr, true);
    let (l, a) = (&lazy["flight_recorder"], &all["flight_recorder"]);
    assert_eq!(a["dumps_read"], RANKS, "{a:#}");
    assert_eq!(a["dumps_listed_only"], 0, "{a:#}");
    let read = l["dumps_read"].as_u64().expect("dumps_read");
    let listed = l["dumps_listed_only"].as_u64().expect("dumps_listed_only");
    assert_eq!(read + listed, RANKS as u64, "{l:#}");
    assert!(read < 8, "only a few dumps read: {l:#}");
    assert_eq!(
        l["ranks_listed_only"].as_array().map(Vec::len),
        Some(listed as usize)
    );
    assert!(
        !l["ranks_listed_only"]
            .as_array()
            .expect("ranks")
            .contains(&Value::from(VICTIM)),
        "the rank that died is read: {l:#}"
    );

    assert_eq!(verdict(&lazy), verdict(&all));
    // And the verdict is the one to give: rank 40 never completed #12, with its Python line.
    let lines = verdict(&lazy)["fr_evidence"].to_string();
    assert!(
        lines.contains("rank 40 waits in all_reduce #12") && lines.contains("train.py:77"),
        "{lines}"
    );
}

/// The lazy plan knows a rank by its communicator membership: in a long job whose thread rings
/// wrapped, the membership must still be there (the shim, and the synthetic writer the benchmark
/// uses, keep communicator records in the keep ring). Without it every dump would be read.
#[test]
fn a_job_whose_rings_wrapped_still_knows_its_ranks_and_communicator() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let job = tmp.path().join("job");
    let sizes = ncclshim_fixtures::scenarios::ScaleSizes {
        colls: 300,
        shim_slots: 64,
        prof_slots: 0,
    };
    ncclshim_fixtures::scenarios::scale_job(&job, 16, sizes).expect("the job is written");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["report", "--json"])
        .arg(&job)
        .output()
        .expect("the ncclshim binary runs");
    let v: Value = serde_json::from_slice(&out.stdout).expect("report --json is JSON");
    assert_eq!(v["job"]["ranks"], 16, "{:#}", v["job"]);
    assert_eq!(
        v["job"]["communicators"].as_array().map(Vec::len),
        Some(1),
        "{:#}",
        v["job"]
    );
    let primary = &v["findings"][0];
    assert_eq!(primary["ranks"], serde_json::json!([8]), "{primary:#}");
}
