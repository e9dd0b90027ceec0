//! Jobs shaped like production ones, through the real shim against the NCCL TEST DOUBLE
//! (`shim/tests/doubles/nccl_double.c`, named as such: no communicator can be made without a
//! GPU otherwise): a job long enough to wrap every thread ring many times, and a job whose
//! ranks crash, are SIGKILLed, and block in a collective until the launcher's timeout SIGTERMs
//! them. The dumps and `ncclshim report --json` must tell every rank's story.

mod support;

use ncclshim_format::reader::{read_dump, Dump};
use ncclshim_format::{CallId, RecordKind};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::native::{build_against_double, shim_so};

struct Rank {
    child: Child,
    rank: u32,
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(prog: &Path, dumps: &Path, rank: u32, nranks: u32, ops: u64, then: &str) -> Rank {
    let mut c = Command::new(prog);
    c.args([
        rank.to_string(),
        nranks.to_string(),
        ops.to_string(),
        then.to_string(),
    ])
    .env("LD_PRELOAD", shim_so())
    .env("NCCLSHIM_DIR", dumps)
    .env("RANK", rank.to_string())
    .env("WORLD_SIZE", nranks.to_string())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if then == "block" || then == "race" {
        c.env("NCCL_DOUBLE_BLOCK_AT", ops.to_string());
    }
    Rank {
        child: c.spawn().expect("spawn"),
        rank,
    }
}

/// Waits for the rank's "ready" line (it finished its operations).
fn wait_ready(r: &mut Rank) {
    let out = r.child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(150))
        .expect("rank never got ready");
    assert_eq!(line.trim(), "ready", "rank {}", r.rank);
}

fn signal(r: &Rank, sig: i32) {
    // SAFETY: sending a signal to our own child, which has not been reaped yet.
    unsafe { libc::kill(r.child.id() as i32, sig) };
}

fn wait_exit(r: &mut Rank) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = r.child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "rank {} did not end", r.rank);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dumps_by_pid(dir: &Path) -> Vec<Dump> {
    let mut v: Vec<Dump> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| read_dump(&e.unwrap().path()).expect("readable dump"))
        .collect();
    v.sort_by_key(|d| d.header.pid);
    v
}

fn report_json(dir: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("report")
        .arg(dir)
        .arg("--json")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report --json: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    support::schema::check_report(&v);
    v
}

fn findings(v: &Value) -> &Vec<Value> {
    v["findings"].as_array().expect("findings")
}

#[test]
fn a_ten_million_collective_job_keeps_identity_and_names_the_rank_that_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "job_rank");
    let dumps = tmp.path().join("dumps");
    const OPS: u64 = 2_600_000; // x 4 ranks: 10.4 million collectives
    const STOPPED_AT: u64 = OPS - 7_000;
    let mut ranks: Vec<Rank> = (0..4)
        .map(|r| {
            let (ops, then) = if r == 2 {
                (STOPPED_AT, "sleep")
            } else {
                (OPS, "wait")
            };
            spawn(&prog, &dumps, r, 4, ops, then)
        })
        .collect();
    for r in &mut ranks {
        wait_ready(r);
    }
    // The launcher's timeout: everything still running gets SIGTERM.
    std::thread::sleep(Duration::from_millis(300));
    for r in &ranks {
        signal(r, libc::SIGTERM);
    }
    for r in &mut ranks {
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&wait_exit(r)),
            Some(libc::SIGTERM)
        );
    }

    let ds = dumps_by_pid(&dumps);
    assert_eq!(ds.len(), 4);
    for d in &ds {
        // The thread's ring wrapped many times over...
        assert!(d.summary.lost > 1_000_000, "{:?}", d.summary);
        // ...so the old layout, where identity lived only in the rings, has lost it: no
        // creation record is left in any thread ring (the negative control) ...
        let keep = d.header.ring_count + 1;
        assert!(!d.records.iter().any(|r| r.ring != keep
            && (r.call() == Some(CallId::CommCreated)
                || r.call() == Some(CallId::NcclCommInitRank))));
        // ... while the keep ring and the communicator table still have it.
        assert!(d
            .records
            .iter()
            .any(|r| r.ring == keep && r.call() == Some(CallId::CommCreated)));
        assert_eq!(d.comms.len(), 1);
        let c = &d.comms[0];
        assert_eq!(c.nranks, 4);
        let expect = if c.rank == 2 { STOPPED_AT } else { OPS };
        assert_eq!(c.issued, expect, "rank {}", c.rank);
        assert_eq!(c.completed, expect);
        assert_eq!(c.last_call, Some(CallId::NcclAllReduce));
        // Stopped by the launcher, recorded as a request to stop (sent by a process).
        let sig = d.header.signal.expect("SIGTERM recorded");
        assert_eq!(sig.signo, libc::SIGTERM as u32);
        assert!(sig.code <= 0);
    }
    let v = report_json(&dumps);
    let fs = findings(&v);
    let stuck = fs
        .iter()
        .find(|f| f["id"] == "stuck-outside-nccl")
        .unwrap_or_else(|| panic!("no stuck finding: {v:#}"));
    assert_eq!(stuck["severity"], "primary", "{stuck:#}");
    assert_eq!(stuck["ranks"], serde_json::json!([2]), "{stuck:#}");
    let text = stuck.to_string();
    assert!(text.contains(&format!("seq {}", STOPPED_AT - 1)), "{text}");
    assert!(text.contains(&format!("seq {}", OPS - 1)), "{text}");
    // Nothing else is blamed: no rank "died", and no SIGTERM of the timeout is a primary.
    for f in fs {
        if f["severity"] == "primary" {
            assert_eq!(f["id"], "stuck-outside-nccl", "{f:#}");
        }
    }
    assert_eq!(
        v["job"]["communicators"][0]["ranks_present"],
        serde_json::json!([0, 1, 2, 3]),
        "{v:#}"
    );
}

#[test]
fn crashed_killed_and_hung_ranks_are_told_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "job_rank");
    let dumps = tmp.path().join("dumps");
    let plan = [(0, "block"), (1, "segv"), (2, "sleep"), (3, "block")];
    let mut ranks: Vec<Rank> = plan
        .iter()
        .map(|&(r, then)| spawn(&prog, &dumps, r, 4, 1000, then))
        .collect();
    for r in &mut ranks {
        wait_ready(r);
    }
    // Rank 1 crashes by itself; then rank 2 is SIGKILLed (the OOM killer, say); later the
    // launcher's timeout SIGTERMs the two ranks blocked in their all-reduce.
    let crashed = wait_exit(&mut ranks[1]);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&crashed),
        Some(libc::SIGSEGV)
    );
    std::thread::sleep(Duration::from_millis(100));
    signal(&ranks[2], libc::SIGKILL);
    wait_exit(&mut ranks[2]);
    std::thread::sleep(Duration::from_millis(300));
    for i in [0, 3] {
        signal(&ranks[i], libc::SIGTERM);
        wait_exit(&mut ranks[i]);
    }

    let pid = |i: usize| ranks[i].child.id();
    let ds = dumps_by_pid(&dumps);
    let of = |i: usize| ds.iter().find(|d| d.header.pid == pid(i)).expect("dump");
    // Crashed: a fault raised by the kernel, at address 0.
    let s1 = of(1).header.signal.expect("segv recorded");
    assert_eq!(s1.signo, libc::SIGSEGV as u32);
    assert!(s1.code > 0);
    // SIGKILLed: no signal can be recorded, no clean exit: its dump just ends.
    assert!(of(2).header.signal.is_none() && !of(2).header.clean_exit);
    // Hung in a collective, then killed by the timeout: SIGTERM sent by a process, with the
    // all-reduce still in flight, and later than both deaths.
    for i in [0, 3] {
        let s = of(i).header.signal.expect("SIGTERM recorded");
        assert_eq!(s.signo, libc::SIGTERM as u32);
        assert!(s.code <= 0);
        assert!(s.t_ns > s1.t_ns);
        let in_flight = of(i)
            .records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::Call) && r.in_flight())
            .filter_map(|r| r.call())
            .collect::<Vec<_>>();
        assert_eq!(in_flight, vec![CallId::NcclAllReduce], "rank {i}");
    }

    let v = report_json(&dumps);
    let primaries: Vec<&Value> = findings(&v)
        .iter()
        .filter(|f| f["severity"] == "primary")
        .collect();
    // The crash is named with its signal. (Rank 2's SIGKILL left no mark: its end is known only
    // as "after its last record", which may come first; both may be primaries.)
    assert!(
        primaries
            .iter()
            .any(|f| f["id"] == "fatal-signal" && f["ranks"] == serde_json::json!([1])),
        "{v:#}"
    );
    for f in &primaries {
        let ranks = f["ranks"].as_array().unwrap();
        assert!(
            !ranks.contains(&serde_json::json!(0)) && !ranks.contains(&serde_json::json!(3)),
            "a rank that waited until killed is blamed: {f:#}"
        );
    }
}

/// Catalog C25 through the real shim: on one rank, a second thread enters an all-reduce on the
/// communicator while the main thread is still inside one; the other rank waits in its
/// watchdog. The job is then stopped like a launcher's timeout. The report names the
/// concurrent use as the cause (the hang is its consequence), on the right rank.
#[test]
fn two_threads_on_one_communicator_are_named_as_the_cause_of_the_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "job_rank");
    let dumps = tmp.path().join("dumps");
    let mut ranks = vec![
        spawn(&prog, &dumps, 0, 2, 100, "wait"),
        spawn(&prog, &dumps, 1, 2, 100, "race"),
    ];
    for r in &mut ranks {
        wait_ready(r);
    }
    std::thread::sleep(Duration::from_millis(200));
    for r in &ranks {
        signal(r, libc::SIGTERM);
    }
    for r in &mut ranks {
        wait_exit(r);
    }
    let v = report_json(&dumps);
    let fs = findings(&v);
    let race = fs
        .iter()
        .find(|f| f["id"] == "communicator-used-from-several-threads")
        .unwrap_or_else(|| panic!("no C25 finding: {v:#}"));
    assert_eq!(race["severity"], "primary", "{v:#}");
    assert_eq!(race["ranks"], serde_json::json!([1]), "{v:#}");
    for f in fs {
        if f["id"] != race["id"] {
            assert_ne!(f["severity"], "primary", "a second primary: {f:#}");
        }
    }
}
