//! Flight Recorder dumps of an earlier run left in a reused job directory are not this run's:
//! a real job (the real shim preloaded into a program that fails `ncclGetUniqueId` for real on
//! the PyPI libnccl) writes its dump beside `fr/rank_*` of a run from the day before (the
//! fixtures of `tests/fixtures/flight-recorder/v2.10`, whose entries are of 2026-11-27). The
//! report's first failure is the real one, the old dumps are listed as another run's and add
//! no stand-in rank, mismatch or missing rank, whether the files' times tell (not read at all)
//! or only their entries do (a copy that renewed the files' times).

mod support;

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, SystemTime};
use support::cli::report_json;
use support::native::failed_unique_id_job;

fn real_job_with_old_flight_recorder_dumps(tmp: &Path, age: Option<Duration>) -> Value {
    let dir = tmp.join("job");
    failed_unique_id_job(tmp, &dir);
    let fr = dir.join("fr");
    std::fs::create_dir_all(&fr).unwrap();
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flight-recorder/v2.10");
    for rank in 0..3 {
        let to = fr.join(format!("rank_{rank}"));
        std::fs::copy(old.join(format!("rank_{rank}")), &to).unwrap();
        if let Some(age) = age {
            let f = std::fs::File::options().write(true).open(&to).unwrap();
            f.set_modified(SystemTime::now() - age).unwrap();
        }
    }
    let (_, v, _) = report_json(&dir, &[]);
    v
}

fn check(v: &Value, reason: &str) {
    let first = &v["first_failure"];
    assert_eq!(first["call"], "ncclGetUniqueId", "{first}");
    assert_eq!(
        v["job"]["processes"], 1,
        "no stand-in for the old ranks: {}",
        v["job"]
    );
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 3, "{problems:?}");
    for p in problems {
        let error = p["error"].as_str().unwrap();
        assert!(
            p["file"].as_str().unwrap().starts_with("fr/rank_")
                && error.contains("a Flight Recorder dump of another run")
                && error.contains(reason),
            "{p}"
        );
    }
    let findings: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    for stray in ["missing-ranks", "version-mismatch", "collective-mismatch"] {
        assert!(!findings.contains(&stray), "{findings:?}");
    }
    let fr = &v["flight_recorder"];
    assert!(
        fr.is_null()
            || (fr["dumps_read"] == 0 && fr["ranks_with_dump"] == serde_json::json!([]))
                && fr["ranks_without_ncclshim"] == serde_json::json!([]),
        "{fr}"
    );
}

#[test]
fn dumps_written_the_day_before_are_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let v =
        real_job_with_old_flight_recorder_dumps(tmp.path(), Some(Duration::from_secs(22 * 3600)));
    check(&v, "written 22 h before this run began");
}

#[test]
fn copies_with_new_file_times_are_told_by_their_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let v = real_job_with_old_flight_recorder_dumps(tmp.path(), None);
    check(&v, "its latest entry is");
}
