//! The report on real captures: dumps our recorder wrote inside real NCCL jobs on a real GPU
//! (`tests/fixtures/real-gpu/<date>/*.tar.gz`), each checked against what `cases.json` says a
//! correct report on that job says (exit status, the ranks of the primary finding, words it must
//! use, its failure-catalog case). These are the ground truth no synthetic dump can replace: the
//! numbering, the events and the gaps of a real NCCL, as it really is.
//!
//! One test per case, so a regression names the job; `every_case_has_a_test` makes a case added
//! to `cases.json` without a test here fail.

mod support;
// Perfetto's importer's rules (test support shared with the trace crate and the lab).
#[allow(dead_code)]
#[path = "../../tests/support/trace_validate.rs"]
mod trace_validate;

use regex::RegexBuilder;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One capture: a folder of `NAME.tar.gz` and their `cases.json` (a GPU run's date, and the
/// machine where one day had several).
fn capture_dir(capture: &str) -> PathBuf {
    support::captures::real_gpu_root().join(capture)
}

fn cases(capture: &str) -> Vec<Value> {
    let path = capture_dir(capture).join("cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .as_array()
        .expect("cases.json is a list")
        .clone()
}

fn case(capture: &str, name: &str) -> Value {
    cases(capture)
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name} in {capture}/cases.json"))
}

/// Unpacks `NAME.tar.gz` into a fresh directory; returns it (kept alive by the guard) and the
/// dumps directory inside.
fn unpack(capture: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let (dir, case) = support::captures::unpack_case(&capture_dir(capture), name);
    let dumps = case.join("dumps");
    assert!(
        dumps.is_dir(),
        "{} holds no {name}/dumps",
        capture_dir(capture)
            .join(format!("{name}.tar.gz"))
            .display()
    );
    (dir, dumps)
}

/// `ncclshim report [--json] --color never DIR`: (exit status, stdout).
fn report(dumps: &Path, json: bool) -> (i32, String) {
    let args: &[&str] = if json {
        &["--json", "--color", "never"]
    } else {
        &["--color", "never"]
    };
    let (code, stdout, _) = support::cli::report(dumps, args);
    (code, stdout)
}

/// The text of the primary findings the `words` are matched against: title and evidence of
/// each, and the first-failure line (what, call, error text), not anything anywhere in the
/// report.
fn primary_text(report: &Value, primaries: &[&Value]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for f in primaries {
        parts.push(f["title"].as_str().unwrap_or_default().to_owned());
        for e in f["evidence"].as_array().into_iter().flatten() {
            parts.push(e["text"].as_str().unwrap_or_default().to_owned());
        }
    }
    let first = &report["first_failure"];
    for k in ["what", "call", "error_text"] {
        if let Some(s) = first[k].as_str() {
            parts.push(s.to_owned());
        }
    }
    parts.join("\n")
}

fn check(capture: &str, name: &str) {
    let case = case(capture, name);
    let expect = &case["expect"];
    let (_guard, dumps) = unpack(capture, name);
    let (code, json) = report(&dumps, true);
    let (text_code, text) = report(&dumps, false);
    // Everything a failure message needs to be readable: what the job was and both reports.
    let shown = format!(
        "case {capture}/{name}: {}\n--- report (text) ---\n{text}\n--- report --json ---\n{json}",
        case["what"].as_str().unwrap_or_default()
    );
    let v: Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("report --json is not JSON ({e})\n{shown}"));
    support::schema::check_report(&v);
    assert_eq!(
        code, text_code,
        "the text and JSON reports disagree on the exit status\n{shown}"
    );

    let want_exit = expect["exit"]
        .as_i64()
        .expect("every case says its exit status");
    assert_eq!(i64::from(code), want_exit, "exit status\n{shown}");

    let findings: Vec<&Value> = v["findings"].as_array().into_iter().flatten().collect();
    let primaries: Vec<&Value> = findings
        .iter()
        .copied()
        .filter(|f| f["severity"] == "primary")
        .collect();
    if want_exit == 0 {
        let above: Vec<&str> = findings
            .iter()
            .filter(|f| f["severity"] != "advisory")
            .map(|f| f["id"].as_str().unwrap_or_default())
            .collect();
        assert!(
            above.is_empty(),
            "a healthy job has findings above advisory: {above:?}\n{shown}"
        );
    } else {
        assert!(
            !primaries.is_empty(),
            "a failed job has a primary finding\n{shown}"
        );
    }

    if let Some(want) = expect["primary_ranks"].as_array() {
        let want: BTreeSet<u64> = want.iter().filter_map(Value::as_u64).collect();
        let got: BTreeSet<u64> = primaries
            .iter()
            .flat_map(|f| f["ranks"].as_array().into_iter().flatten())
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(got, want, "the ranks of the primary findings\n{shown}");
    }

    let haystack = primary_text(&v, &primaries);
    for w in expect["words"].as_array().into_iter().flatten() {
        let w = w.as_str().expect("words are regexes");
        let re = RegexBuilder::new(w)
            .case_insensitive(true)
            .build()
            .unwrap_or_else(|e| panic!("case {name}: bad regex {w:?}: {e}"));
        assert!(
            re.is_match(&haystack),
            "no primary finding says /{w}/; their text:\n{haystack}\n{shown}"
        );
    }

    if let Some(id) = expect["primary_id"].as_str() {
        let ids: Vec<&str> = primaries
            .iter()
            .map(|f| f["id"].as_str().unwrap_or_default())
            .collect();
        assert!(
            ids.contains(&id),
            "no primary finding is {id}: {ids:?}\n{shown}"
        );
    }

    let catalogs: Vec<&str> = primaries
        .iter()
        .map(|f| f["catalog"].as_str().unwrap_or("none"))
        .collect();
    if let Some(c) = expect["primary_catalog"].as_str() {
        assert!(
            catalogs.contains(&c),
            "no primary finding is {c}: {catalogs:?}\n{shown}"
        );
    }
    if let Some(c) = expect["primary_catalog_only"].as_str() {
        assert!(
            catalogs.iter().all(|x| *x == c),
            "every primary finding must be {c}: {catalogs:?}\n{shown}"
        );
    }
}

macro_rules! real_gpu_cases {
    ($($(#[$attr:meta])* $test:ident => $capture:literal / $name:literal),* $(,)?) => {
        $(
            #[test]
            $(#[$attr])*
            fn $test() {
                check($capture, $name);
            }
        )*
        /// The (capture, case) pairs this file tests.
        const TESTED: &[(&str, &str)] = &[$(($capture, $name)),*];
    };
}

real_gpu_cases! {
    mr_healthy => "2026-11-27" / "mr-healthy",
    mr_healthy_all => "2026-11-27" / "mr-healthy-all",
    mr_hang => "2026-11-27" / "mr-hang",
    mr_crash => "2026-11-27" / "mr-crash",
    mr_op_mismatch => "2026-11-27" / "mr-op-mismatch",
    mr_version => "2026-11-27" / "mr-version",
    badrank => "2026-11-27" / "badrank",
    selfsend => "2026-11-27" / "selfsend",
    net_ib => "2026-11-27" / "net-ib",
    bad_ifname => "2026-11-27" / "bad-ifname",
    dup_gpu => "2026-11-27" / "dup-gpu",
    loop_1rank => "2026-11-27" / "loop-1rank",
    cumem1 => "2026-11-27" / "cumem1",
    mr_slow => "2026-11-27" / "mr-slow",
    h100_count_mismatch => "2026-11-27-h100" / "count-mismatch",
    h100_crash_segv => "2026-11-27-h100" / "crash-segv",
    h100_crash_sigkill => "2026-11-27-h100" / "crash-sigkill",
    h100_cumem => "2026-11-27-h100" / "cumem",
    h100_dup_gpu => "2026-11-27-h100" / "dup-gpu",
    h100_exception => "2026-11-27-h100" / "exception",
    h100_exit_early => "2026-11-27-h100" / "exit-early",
    h100_healthy => "2026-11-27-h100" / "healthy",
    h100_ipc_open_failed => "2026-11-27-h100" / "ipc-open-failed",
    h100_laggard => "2026-11-27-h100" / "laggard",
    h100_laggard_watchdog => "2026-11-27-h100" / "laggard-watchdog",
    h100_net_ib => "2026-11-27-h100" / "net-ib",
    h100_oom_before_init => "2026-11-27-h100" / "oom-before-init",
    h100_op_mismatch => "2026-11-27-h100" / "op-mismatch",
    h100_p2p_size_mismatch => "2026-11-27-h100" / "p2p-size-mismatch",
    h100_ring_accounting => "2026-11-27-h100" / "ring-accounting",
    h100_two_versions => "2026-11-27-h100" / "two-versions",
    h200_count_mismatch => "2026-11-28-h200" / "count-mismatch",
    h200_crash_segv => "2026-11-28-h200" / "crash-segv",
    h200_crash_sigkill => "2026-11-28-h200" / "crash-sigkill",
    h200_cumem => "2026-11-28-h200" / "cumem",
    h200_dup_gpu => "2026-11-28-h200" / "dup-gpu",
    h200_exception => "2026-11-28-h200" / "exception",
    h200_exit_early => "2026-11-28-h200" / "exit-early",
    h200_healthy => "2026-11-28-h200" / "healthy",
    h200_ipc_open_failed => "2026-11-28-h200" / "ipc-open-failed",
    h200_laggard => "2026-11-28-h200" / "laggard",
    h200_laggard_watchdog => "2026-11-28-h200" / "laggard-watchdog",
    h200_net_ib => "2026-11-28-h200" / "net-ib",
    h200_node_8 => "2026-11-28-h200" / "node-8",
    h200_oom_before_init => "2026-11-28-h200" / "oom-before-init",
    h200_op_mismatch => "2026-11-28-h200" / "op-mismatch",
    h200_p2p_size_mismatch => "2026-11-28-h200" / "p2p-size-mismatch",
    h200_ring_accounting => "2026-11-28-h200" / "ring-accounting",
    h200_two_versions => "2026-11-28-h200" / "two-versions",
}

/// `report --story` on a real capture: the crash is the one root and the survivor's remote
/// error names it as its explanation (what the verdict then reasons over).
#[test]
fn the_story_of_a_real_crash() {
    let (_guard, dumps) = unpack("2026-11-27-h100", "crash-sigkill");
    let (_, text, _) = support::cli::report(&dumps, &["--color", "never", "--story"]);
    let story = &text[text.find("\nstory:\n").expect("a story section")..];
    assert!(
        story.contains("rank 1 (vm pid 2057): ended without any mark"),
        "{story}"
    );
    let roots: Vec<&str> = story.lines().filter(|l| l.ends_with("-- ROOT")).collect();
    assert_eq!(roots.len(), 1, "{story}");
    assert!(
        roots[0].contains("rank 1 ") && roots[0].contains("ends without a clean exit"),
        "{story}"
    );
    assert!(
        story.lines().any(|l| l.contains("rank 0 ")
            && l.contains("Connection closed")
            && l.contains("explained by [0]")),
        "{story}"
    );
}

/// `ncclshim dump FILE`: its JSON lines (header first, then rings and records).
fn dump_lines(file: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("dump")
        .arg(file)
        .output()
        .expect("the ncclshim binary runs");
    assert!(out.status.success(), "{}: {out:?}", file.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `ncclshim trace` on real jobs whose ranks were killed (the launcher's SIGTERM) while waiting
/// inside all_reduce #11 (seq 10): that call is drawn from its start up to the rank's end, the
/// fatal signal its dump header records, marked in flight, and the rank's end marker sits at
/// the same time. Before, it ended at the rank's last record (microseconds after its start).
#[test]
fn a_real_all_reduce_hung_until_the_rank_was_killed_reaches_the_ranks_end_in_the_trace() {
    for (name, hung_ranks) in [("laggard", 2), ("crash-sigkill", 1)] {
        let (guard, dumps) = unpack("2026-11-27-h100", name);
        let trace_path = guard.path().join("trace.json");
        let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
            .arg("trace")
            .arg(&dumps)
            .arg("-o")
            .arg(&trace_path)
            .output()
            .expect("the ncclshim binary runs");
        assert!(out.status.success(), "{name}: {out:?}");
        let trace: Value =
            serde_json::from_slice(&std::fs::read(&trace_path).unwrap()).expect("JSON");
        trace_validate::validate(&trace).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let hung: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["args"]["state"] == "in flight at end"
                    && e["name"] == "Coll AllReduce (unfinished)"
            })
            .collect();
        assert_eq!(hung.len(), hung_ranks, "{name}: {hung:?}");
        for e in hung {
            let f = |v: &Value| v.as_f64().unwrap();
            assert_eq!(e["args"]["seq"], 10, "{name}: all_reduce #11: {e}");
            assert_eq!(
                e["args"]["drawn_to"], "the fatal signal the process received",
                "{name}: {e}"
            );
            // The rank's end marker: at the slice's end.
            let end = events
                .iter()
                .find(|m| {
                    m["pid"] == e["pid"]
                        && m["s"] == "p"
                        && m["cat"] == "failure"
                        && m["name"].as_str().unwrap().starts_with("process ended")
                })
                .unwrap_or_else(|| panic!("{name}: no end marker for {e}"));
            assert!(
                (f(&e["ts"]) + f(&e["dur"]) - f(&end["ts"])).abs() < 0.002,
                "{name}: {e} {end}"
            );
            // The slice lasts from the call's start to the signal, as the dumps record them.
            let label = events
                .iter()
                .find(|m| m["pid"] == e["pid"] && m["name"] == "process_name")
                .and_then(|m| m["args"]["name"].as_str())
                .unwrap();
            let pid = label
                .split("pid ")
                .nth(1)
                .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
                .unwrap_or_else(|| panic!("{name}: a pid in {label:?}"));
            let file = |kind: &str| {
                std::fs::read_dir(&dumps)
                    .unwrap()
                    .flatten()
                    .map(|d| d.path())
                    .find(|p| {
                        let n = p.file_name().unwrap().to_string_lossy().into_owned();
                        n.starts_with(&format!("vm.{pid}."))
                            && n.ends_with(&format!(".{kind}.ncclshim"))
                    })
                    .unwrap_or_else(|| panic!("{name}: no {kind} dump of pid {pid}"))
            };
            let signal_t = dump_lines(&file("shim"))[0]["header"]["signal"]["t_ns"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: pid {pid} recorded a fatal signal"));
            let start_t = dump_lines(&file("prof"))
                .iter()
                .find(|r| {
                    r["kind"] == "prof_start" && r["call"] == "Coll" && r["args"]["seq"] == 10
                })
                .and_then(|r| r["t_enter_ns"].as_u64())
                .unwrap();
            assert!(
                signal_t > start_t + 1_000_000_000,
                "{name}: it waited seconds"
            );
            let dur_ns = f(&e["dur"]) * 1000.0;
            assert!(
                (dur_ns - (signal_t - start_t) as f64).abs() < 2.0,
                "{name}: pid {pid}: {e} lasts {dur_ns} ns, the dumps say {}",
                signal_t - start_t
            );
        }
    }
}

/// The GPU suite's table (`tests/gpu/checks.toml`, run on a GPU machine by `tests/gpu/suite.py`)
/// holds: every job names a scenario `jobs.py` has, checks `suite.py` knows, expectations in the
/// keys `check` above reads, and finding ids the rules can make. A job added there is checked
/// here before anyone spends GPU time on it.
#[test]
fn the_gpu_suite_table_is_consistent() {
    let gpu = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/gpu");
    let read =
        |f: &str| std::fs::read_to_string(gpu.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let table: toml::Value = toml::from_str(&read("checks.toml")).expect("checks.toml parses");
    let (jobs_py, suite_py) = (read("jobs.py"), read("suite.py"));
    let jobs = table["job"].as_array().expect("[[job]] entries");
    assert!(jobs.len() >= 15, "the suite lost jobs: {}", jobs.len());
    let mut names = BTreeSet::new();
    for job in jobs {
        let name = job["name"].as_str().expect("a name");
        assert!(names.insert(name), "job {name} twice");
        let scenario = job["scenario"].as_str().expect("a scenario");
        assert!(
            jobs_py.contains(&format!("\"{scenario}\": ")),
            "{name}: jobs.py has no scenario {scenario}"
        );
        assert!(
            job["ranks"]
                .as_integer()
                .is_some_and(|r| (1..=8).contains(&r)),
            "{name}: ranks"
        );
        assert!(
            job["timeout_s"].as_integer().is_some_and(|t| t > 0),
            "{name}: timeout_s"
        );
        for extra in job
            .get("extra")
            .and_then(|e| e.as_array())
            .into_iter()
            .flatten()
        {
            let extra = extra.as_str().expect("extra checks are names");
            assert!(
                suite_py.contains(&format!("\"{extra}\": extra_")),
                "{name}: suite.py has no extra check {extra}"
            );
        }
        let expect = job["expect"].as_table().expect("an expect table");
        for key in expect.keys() {
            assert!(
                [
                    "exit",
                    "primary_ranks",
                    "primary_id",
                    "primary_catalog",
                    "primary_catalog_only",
                    "words"
                ]
                .contains(&key.as_str()),
                "{name}: unknown expectation {key}"
            );
        }
        assert!(
            expect.contains_key("exit"),
            "{name}: every job says its exit status"
        );
        if let Some(id) = expect.get("primary_id").and_then(|v| v.as_str()) {
            let known = ncclshim_diagnose::rules::registry::is_known_id(id);
            assert!(known, "{name}: no rule makes the id {id}");
        }
        for w in expect
            .get("words")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            RegexBuilder::new(w.as_str().expect("words are regexes"))
                .build()
                .unwrap_or_else(|e| panic!("{name}: bad regex: {e}"));
        }
    }
}

#[test]
fn every_case_has_a_test() {
    let mut listed: BTreeSet<(String, String)> = BTreeSet::new();
    for entry in
        std::fs::read_dir(support::captures::real_gpu_root()).expect("the real-gpu fixtures folder")
    {
        let dir = entry.expect("a readable entry").path();
        if !dir.join("cases.json").is_file() {
            continue;
        }
        let capture = dir.file_name().unwrap().to_string_lossy().into_owned();
        for c in cases(&capture) {
            let name = c["name"]
                .as_str()
                .expect("every case has a name")
                .to_owned();
            assert!(
                dir.join(format!("{name}.tar.gz")).is_file(),
                "case {capture}/{name} has no tarball"
            );
            listed.insert((capture.clone(), name));
        }
    }
    let tested: BTreeSet<(String, String)> = TESTED
        .iter()
        .map(|(c, n)| (c.to_string(), n.to_string()))
        .collect();
    assert_eq!(
        listed, tested,
        "the captures' cases.json and the tests in real_gpu.rs list different cases"
    );
}
