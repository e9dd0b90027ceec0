//! Golden tests: every synthetic scenario the scenario lab does not reproduce (`GOLDEN_IN_THE_LAB`)
//! is written with the real dump writer, analyzed, and its `--json` report compared with a
//! reviewed snapshot (volatile fields redacted); the lab keeps the others' goldens from real
//! captures. The committed
//! fixtures under `tests/fixtures/synthetic/` must give the same report as a fresh generation.

mod support;

use ncclshim_diagnose::report::Report;
use ncclshim_fixtures::scenarios;
use std::path::Path;

/// Every report of this file goes through here: analyzed, then held to the JSON contract.
fn analyze(dir: &Path) -> Report {
    let r = ncclshim_diagnose::analyze_dir(dir, None).expect("analyze");
    support::schema::report_json(&r);
    r
}

fn report_json(dir: &Path) -> serde_json::Value {
    support::schema::report_json(&analyze(dir))
}

/// Replaces values that differ from run to run (times, this tool's version).
fn redact(mut v: serde_json::Value) -> serde_json::Value {
    v["tool_version"] = "[version]".into();
    let fix = |l: &mut serde_json::Value| {
        if l.is_object() {
            l["t_unix_ns"] = "[time]".into();
            l["after_first_ms"] = "[ms]".into();
        }
    };
    fix(&mut v["first_failure"]);
    if let Some(a) = v["failure_order"].as_array_mut() {
        a.iter_mut().for_each(fix);
    }
    v
}

/// Synthetic scenarios whose case the scenario lab reproduces through the real capture path
/// (`tests/scenarios/<lab>.toml`, `golden = true`): their golden report is the lab's real
/// capture (`tests/lab/snapshots/<lab>.snap`), not this writer's. The synthetic jobs stay as
/// record-shape fixtures (trace and dump tests, the fixture check below).
///
/// Not here: `c03-version-mismatch` (its lab report groups the ranks stopped by SIGTERM by how
/// many ms after the first failure they were stopped, which varies from run to run) and
/// `missing-and-running` (no lab scenario).
const GOLDEN_IN_THE_LAB: &[(&str, &str)] = &[
    ("c01-nccl-net-ib", "c01-nccl-net-ib"),
    ("c02-unpaired-p2p", "c02-unpaired-p2p"),
    ("c04-cumem-containers", "c04-cumem-containers"),
    ("c05-gdr-peermem", "c05-gdr-peermem"),
    ("c06-duplicate-gpu", "c06-duplicate-gpu"),
    ("c19-desync", "c19-desync"),
    ("c20-dead-peer", "c20-dead-peer"),
    ("healthy", "healthy-16-ranks"),
];

#[test]
fn the_lab_keeps_the_goldens_it_took_over() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (synthetic, lab) in GOLDEN_IN_THE_LAB {
        assert!(
            scenarios::ALL.iter().any(|(n, _)| n == synthetic),
            "{synthetic}: no such synthetic scenario"
        );
        let file = root.join(format!("tests/scenarios/{lab}.toml"));
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{synthetic}: its lab scenario {}: {e}", file.display()));
        assert!(
            text.lines().any(|l| l.trim() == "golden = true"),
            "{}: the golden of {synthetic} lives here now; keep `golden = true`",
            file.display()
        );
        let snap = root.join(format!("tests/lab/snapshots/{lab}.snap"));
        assert!(snap.exists(), "{} missing", snap.display());
    }
}

#[test]
fn every_scenario_the_lab_does_not_cover_matches_its_snapshot() {
    for (name, build) in scenarios::ALL {
        if GOLDEN_IN_THE_LAB.iter().any(|(s, _)| s == name) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        build(dir.path()).unwrap();
        let v = redact(report_json(dir.path()));
        insta::assert_json_snapshot!(*name, v);
    }
}

#[test]
fn committed_fixtures_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/synthetic");
    for (name, build) in scenarios::ALL {
        let fixture = root.join(name);
        assert!(
            fixture.is_dir(),
            "{} missing: run `cargo run -p ncclshim-fixtures --example gen_synthetic`",
            fixture.display()
        );
        let fresh = tempfile::tempdir().unwrap();
        build(fresh.path()).unwrap();
        assert_eq!(
            redact(report_json(&fixture)),
            redact(report_json(fresh.path())),
            "{name}: committed fixture is stale; regenerate with `cargo run -p ncclshim-fixtures --example gen_synthetic`"
        );
    }
}

#[test]
fn seed_cases_name_their_catalog_entry_as_primary() {
    let expect = [
        ("c01-nccl-net-ib", "C01"),
        ("c02-unpaired-p2p", "C02"),
        ("c03-version-mismatch", "C03"),
        ("c04-cumem-containers", "C04"),
        ("c05-gdr-peermem", "C05"),
        ("c06-duplicate-gpu", "C06"),
        ("c19-desync", "C19"),
    ];
    for (name, catalog) in expect {
        let build = scenarios::ALL.iter().find(|(n, _)| *n == name).unwrap().1;
        let dir = tempfile::tempdir().unwrap();
        build(dir.path()).unwrap();
        let r = analyze(dir.path());
        let primary: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.severity == ncclshim_diagnose::rules::Severity::Primary)
            .filter_map(|f| f.catalog())
            .collect();
        assert!(
            primary.contains(&catalog),
            "{name}: primary findings {primary:?}"
        );
        assert!(r.job.synthetic);
        assert_eq!(r.exit_code(), 1);
    }
}

#[test]
fn healthy_job_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    scenarios::healthy(dir.path()).unwrap();
    let r = analyze(dir.path());
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.exit_code(), 0);
    assert!(r.first_failure.is_none());
}

#[test]
fn dead_peer_names_the_rank_that_died_first() {
    let dir = tempfile::tempdir().unwrap();
    scenarios::c20(dir.path()).unwrap();
    let r = analyze(dir.path());
    assert_eq!(r.first_failure.as_ref().and_then(|f| f.rank), Some(2));
    let c20 = r
        .findings
        .iter()
        .find(|f| f.catalog() == Some("C20"))
        .unwrap();
    assert_eq!(
        c20.severity,
        ncclshim_diagnose::rules::Severity::Contributing
    );
}

#[test]
fn missing_and_running_ranks() {
    let dir = tempfile::tempdir().unwrap();
    scenarios::missing_and_running(dir.path()).unwrap();
    let r = analyze(dir.path());
    let c = &r.job.communicators[0];
    assert_eq!(c.nranks, 4);
    assert_eq!(c.ranks_present, vec![0, 1]);
    assert_eq!(c.ranks_missing, vec![2, 3]);
    assert!(r
        .findings
        .iter()
        .any(|f| f.id() == "ranks-never-arrived" && f.ranks == vec![2, 3]));
}

/// Real captures (`tests/fixtures/real/`, recorded by the shim around real libnccl failing on a
/// machine without a GPU): their reports are snapshot-tested like the synthetic ones.
#[test]
fn real_captures_match_their_snapshots() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return; // no real captures in this checkout
    };
    let mut dirs: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = format!("real-{}", dir.file_name().unwrap().to_string_lossy());
        let r = analyze(&dir);
        assert!(
            !r.job.synthetic,
            "{name}: a real capture must not read as synthetic"
        );
        assert!(r.problems.is_empty(), "{name}: {:?}", r.problems);
        insta::assert_json_snapshot!(name, redact(support::schema::report_json(&r)));
    }
}

/// The profiler plugin's 8-rank job (its NCCL emulator, `profiler-plugin/tests/fixtures/synthetic/
/// hang-8ranks/`): rank 3 stopped issuing collectives after seq 4 while the other seven entered
/// seq 5 and wait in its kernel. The report must name rank 3 alone, stuck outside NCCL.
///
/// Two record shapes of the same scenario: `hang-8ranks` (a record per kernel channel, the
/// plugin's earlier default and today's `channels` option) and `hang-8ranks-summarized` (one
/// GPU-done record per operation, today's default).
#[test]
fn the_rank_that_fell_behind_in_the_emulated_8_rank_hang_is_named() {
    for fixture in ["hang-8ranks", "hang-8ranks-summarized"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../profiler-plugin/tests/fixtures/synthetic")
            .join(fixture);
        the_rank_that_fell_behind_is_named(&dir);
    }
}

fn the_rank_that_fell_behind_is_named(dir: &Path) {
    let r = analyze(dir);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.job.ranks, 8);
    let primary: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity == ncclshim_diagnose::rules::Severity::Primary)
        .collect();
    assert_eq!(
        primary.len(),
        1,
        "{:?}",
        r.findings.iter().map(|f| f.id()).collect::<Vec<_>>()
    );
    assert_eq!(primary[0].id(), "stuck-outside-nccl");
    assert_eq!(primary[0].ranks, vec![3]);
    let ev = &primary[0].evidence;
    assert!(
        ev.iter()
            .any(|e| e.ranks == [3] && e.values["last_issued_seq"] == 4),
        "{}: {ev:?}",
        dir.display()
    );
    // The seven ranks waiting in the same kernel are one item, not seven lines.
    let waiting: Vec<_> = ev
        .iter()
        .filter(|e| {
            e.values
                .get("state")
                .is_some_and(|s| s == "kernel_never_ended")
        })
        .collect();
    assert_eq!(waiting.len(), 1, "{}: {ev:?}", dir.display());
    assert_eq!(waiting[0].ranks, vec![0, 1, 2, 4, 5, 6, 7]);
    assert_eq!(waiting[0].values["seq"], 5);
    assert!(
        waiting[0]
            .text
            .contains("ranks 0-2,4-7 on vm: comm 0x5eedc0ffee000001: collective seq 5 (AllReduce) its kernel never ended"),
        "{}",
        waiting[0].text
    );
}
