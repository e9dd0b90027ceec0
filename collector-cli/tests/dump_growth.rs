//! Dumps sized by what a process uses, and runs told apart, through the real shim preloaded
//! into real processes against the NCCL TEST DOUBLE (`shim/tests/doubles/nccl_double.c`, named
//! as such: no communicator can be made without a GPU otherwise): a one-call process and a
//! four-thread rank stay small, a process SIGKILLed while its threads keep claiming new rings
//! (the file growing) still reads, and two runs written into one directory are reported apart.

mod support;

use ncclshim_format::reader::read_dump;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::native::{build_against_double, shim_so};

fn preloaded(prog: &Path, dumps: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", dumps)
        .env_remove("SLURM_JOB_ID")
        .env_remove("TORCHELASTIC_RUN_ID")
        .env_remove("NCCLSHIM_RUN_ID")
        .env_remove("PMIX_NAMESPACE")
        .env_remove("OMPI_MCA_orte_ess_jobid");
    c
}

fn only_dump(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

/// (apparent size, allocated bytes) of a file.
fn sizes(p: &Path) -> (u64, u64) {
    let m = std::fs::metadata(p).unwrap();
    (m.len(), m.blocks() * 512)
}

#[test]
fn a_one_call_process_writes_under_one_megabyte() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "thread_calls");
    let dumps = tmp.path().join("dumps");
    let out = preloaded(&prog, &dumps, &["0", "0"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let file = only_dump(&dumps);
    let (len, allocated) = sizes(&file);
    assert!(len < 1 << 20, "{len} bytes");
    assert!(allocated < 1 << 20, "{allocated} bytes allocated");
    let d = read_dump(&file).unwrap();
    assert_eq!(d.header.rings_materialized, 1);
    assert!(d
        .records
        .iter()
        .any(|r| r.call_name() == "ncclGetVersion" && r.rc == 0));
}

#[test]
fn a_four_thread_rank_stays_under_eight_megabytes_however_long_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "thread_calls");
    let dumps = tmp.path().join("dumps");
    // 20,000 all-reduces per thread wrap every 2,048-slot ring many times.
    let out = preloaded(&prog, &dumps, &["4", "20000"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let file = only_dump(&dumps);
    let (len, allocated) = sizes(&file);
    assert!(len < 8 << 20, "{len} bytes");
    assert!(allocated < 8 << 20, "{allocated} bytes allocated");
    let d = read_dump(&file).unwrap();
    // The four workers and the main thread (which created the communicator).
    assert_eq!(d.header.rings_materialized, 5);
    assert_eq!(d.header.ring_alloc_failed, 0);
    let busy: Vec<_> = d.rings.iter().filter(|r| !r.shared && r.lost > 0).collect();
    assert_eq!(busy.len(), 4, "{:?}", d.rings);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.comms.len(), 1);
    assert_eq!(d.comms[0].issued, 80_000);
}

#[test]
fn a_process_killed_while_its_file_grows_still_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "thread_calls");
    for (round, delay_ms) in [5u64, 60, 250].into_iter().enumerate() {
        let dumps = tmp.path().join(format!("dumps{round}"));
        // Every thread claims a fresh ring (4,096 of them), so the file grows the whole time.
        let mut child = preloaded(&prog, &dumps, &["storm", "3"])
            .env("NCCLSHIM_RINGS", "4096")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "storming");
        // Read it live while it grows: never an error.
        let file = only_dump(&dumps);
        for _ in 0..3 {
            read_dump(&file).expect("a growing file reads");
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        let d = read_dump(&file).expect("a file killed mid-growth reads");
        let own: Vec<_> = d.rings.iter().filter(|r| !r.shared).collect();
        assert!(own.len() >= 2, "round {round}: {} rings", own.len());
        assert!(
            u32::try_from(own.len()).unwrap() <= d.header.rings_materialized + 1,
            "a ring is read only once its slots exist"
        );
        // Each storm thread wrote its 3 calls (the last one may be cut by the kill).
        let workers = own
            .iter()
            .filter(|r| r.records > 0 && r.records <= 3)
            .count();
        assert!(workers + 2 >= own.len(), "round {round}: {:?}", d.rings);
        assert_eq!(d.summary.torn, 0, "round {round}");
        let (len, _) = sizes(&file);
        assert!(
            len <= d.header.file_size
                + 4096 * (u64::from(d.header.rings_materialized) + 2) * 65
                + (1 << 20),
            "round {round}: the file is as large as what was claimed ({len} bytes)"
        );
    }
}

fn ncclshim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(args)
        .output()
        .unwrap()
}

fn report(dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["report", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = ncclshim(&args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report --json: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Runs a two-rank job of `job_rank` (rank 1 does `rank1_then`), with `env` set on both ranks.
fn two_rank_job(prog: &Path, dumps: &Path, rank1_then: &str, env: &[(&str, &str)]) {
    let mut kids: Vec<_> = [("0", "exit"), ("1", rank1_then)]
        .into_iter()
        .map(|(rank, then)| {
            let mut c = preloaded(prog, dumps, &[rank, "2", "50", then]);
            c.env("RANK", rank)
                .env("WORLD_SIZE", "2")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    for k in &mut kids {
        k.wait().unwrap();
    }
}

fn fatal_signal_found(v: &Value) -> bool {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.to_string().contains("SIGSEGV"))
}

#[test]
fn two_runs_in_one_directory_are_reported_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "job_rank");
    for named in [true, false] {
        let dumps = tmp.path().join(if named { "named" } else { "unnamed" });
        let (first, second) = if named {
            (
                vec![("SLURM_JOB_ID", "812"), ("SLURM_STEP_ID", "0")],
                vec![("SLURM_JOB_ID", "813"), ("SLURM_STEP_ID", "0")],
            )
        } else {
            (vec![], vec![])
        };
        // The first run crashes on rank 1; the second, later, ends cleanly.
        two_rank_job(&prog, &dumps, "segv", &first);
        // Unnamed runs are told apart by time: more than the one second ranks of one run may
        // be apart.
        std::thread::sleep(Duration::from_millis(if named { 50 } else { 1_500 }));
        two_rank_job(&prog, &dumps, "exit", &second);
        let (old, new) = if named {
            ("812.0", "813.0")
        } else {
            ("unnamed-1", "unnamed-2")
        };

        let latest = report(&dumps, &[]);
        assert!(!fatal_signal_found(&latest), "{latest:#}");
        assert_eq!(latest["job"]["processes"], 2, "{latest:#}");
        let runs = latest["runs"].as_array().expect("runs listed");
        let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(ids, vec![old, new]);
        assert_eq!(runs[1]["reported"], true);
        let note = latest["run_note"].as_str().unwrap();
        assert!(note.starts_with("this directory holds 2 runs: "), "{note}");
        assert!(
            note.contains(&format!(
                "reporting on run {new} (the most recent); use --run ID to choose"
            )),
            "{note}"
        );

        let earlier = report(&dumps, &["--run", old]);
        assert!(fatal_signal_found(&earlier), "{earlier:#}");
        assert_eq!(earlier["job"]["processes"], 2);

        let text = ncclshim(&["report", dumps.to_str().unwrap(), "--color", "never"]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("note: this directory holds 2 runs"), "{text}");

        let listed = ncclshim(&["report", dumps.to_str().unwrap(), "--list-runs"]);
        assert!(listed.status.success());
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert_eq!(listed.lines().count(), 2, "{listed}");
        assert!(listed.lines().next().unwrap().starts_with(old), "{listed}");

        let wrong = ncclshim(&["report", dumps.to_str().unwrap(), "--run", "nope"]);
        assert_eq!(wrong.status.code(), Some(2));
        let err = String::from_utf8_lossy(&wrong.stderr);
        assert!(err.contains("no run \"nope\""), "{err}");
    }
}

/// Threads beyond the dump's rings share its overflow ring, which has no thread of its own: the
/// report names it as that ring, never as "thread 0".
#[test]
fn records_lost_on_the_overflow_ring_are_said_to_be_there() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "thread_calls");
    let dumps = tmp.path().join("dumps");
    // One ring (the main thread's): the four workers write the overflow ring, which wraps.
    let out = preloaded(&prog, &dumps, &["4", "20000"])
        .env("NCCLSHIM_RINGS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let d = read_dump(&only_dump(&dumps)).unwrap();
    assert!(
        d.rings.iter().any(|r| r.shared && r.lost > 0),
        "{:?}",
        d.rings
    );
    let report = ncclshim_diagnose::analyze_dir(&dumps, None).unwrap();
    let lost = report
        .evidence_gaps
        .iter()
        .find(|e| e.text.contains("older records lost"))
        .expect("a records-lost gap");
    assert!(
        lost.text.contains("most on the shared overflow ring") && !lost.text.contains("thread 0:"),
        "{}",
        lost.text
    );
}
