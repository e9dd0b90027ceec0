//! `ncclshim exporter` over a live job: real processes under the real preloaded shim (one held
//! alive and one whose `ncclGetUniqueId` failed, both on the real libnccl of the cu12 wheel;
//! two ranks on the NCCL test double, one blocked inside an all-reduce and one that stopped
//! issuing them, since a communicator needs a GPU from the real library), scraped over HTTP
//! while they run. The text is parsed by Prometheus' own Python client
//! (`text_string_to_metric_families`, pinned in scripts/test-requirements.txt), then the series
//! of each process are checked: failed calls by result name, alive, the stall and the rank it
//! waits for, the operations issued and completed.

mod support;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::native::{build_against_double, nccl_fail_program, shim_so};

const RUN_ID: &str = "job-37";

/// A child killed when the test ends, whatever happens.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn preloaded(prog: &Path, dumps: &Path) -> Command {
    let mut c = Command::new(prog);
    c.env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", dumps)
        .env("NCCLSHIM_RUN_ID", RUN_ID)
        .env_remove("SLURM_JOB_ID")
        .env_remove("TORCHELASTIC_RUN_ID");
    c
}

/// The first line the child prints, within a minute.
fn first_line(kid: &mut Kid) -> String {
    let out = kid.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        // Keep reading so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the child never printed")
}

/// The exporter on a free port, and the address it printed on stderr.
fn start_exporter(dumps: &Path) -> (Kid, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["exporter", "--listen", "127.0.0.1:0", "--stall-after", "1s"])
        .arg(dumps)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let mut line = String::new();
    BufReader::new(err).read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (Kid(child), addr)
}

/// A plain HTTP/1.0 GET: (status code, content type, body).
fn get(addr: &str, path: &str) -> (u32, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or("")
        .to_string();
    (status, content_type, body.to_string())
}

/// The project's venv's python with the test packages (installed on first use).
fn test_python() -> PathBuf {
    support::native::test_venv().join("bin/python")
}

/// Prometheus' parser over `text`: every sample as {family, type, name, labels, value}. It
/// raises on anything the format does not allow.
const PARSE: &str = "\
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({'family': f.name, 'type': f.type, 'help': f.documentation,
                'samples': [{'name': s.name, 'labels': s.labels, 'value': s.value} for s in f.samples]})
print(json.dumps(out))
";

fn parse_with_prometheus_client(python: &Path, text: &str) -> Vec<Value> {
    let mut child = Command::new(python)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected the exposition:\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The samples named `name` whose labels include every pair of `labels`.
fn samples<'a>(fams: &'a [Value], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Value> {
    fams.iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .filter(|s| s["name"] == name)
        .filter(|s| labels.iter().all(|(k, v)| s["labels"][k] == *v))
        .collect()
}

fn value(fams: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found = samples(fams, name, labels);
    assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
    found.first().map(|s| s["value"].as_f64().unwrap())
}

/// The two double ranks: rank 0 blocks inside its (OPS+1)-th all-reduce, rank 1 sleeps after
/// OPS: the rank the others wait for.
const OPS: u64 = 5;

/// The failed `ncclGetUniqueId` calls of the retrying process.
const RETRIES: u32 = 40;

fn double_rank(prog: &Path, dumps: &Path, rank: u32, then: &str) -> Kid {
    let mut c = preloaded(prog, dumps);
    c.args([rank.to_string(), "2".into(), OPS.to_string(), then.into()])
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if then == "block" {
        c.env("NCCL_DOUBLE_BLOCK_AT", OPS.to_string());
    }
    Kid(c.spawn().unwrap())
}

#[test]
fn a_live_job_scraped_over_http_parses_as_prometheus_text_with_its_failures_and_stall() {
    let tmp = tempfile::tempdir().unwrap();
    let dumps = tmp.path().join("dumps");
    let real = tmp.path().join("real");
    let double = tmp.path().join("double");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::create_dir_all(&double).unwrap();
    let nccl_fail = nccl_fail_program(&real);
    let job_rank = build_against_double(&double, "job_rank");

    // The real libnccl: one process whose ncclGetUniqueId fails (and exits), one held alive.
    let failed = preloaded(&nccl_fail, &dumps)
        .arg("uniqueid")
        .env("NCCL_SOCKET_IFNAME", "bad0")
        .output()
        .unwrap();
    assert!(failed.status.success(), "{failed:?}");
    let printed = String::from_utf8_lossy(&failed.stdout);
    let rc: i32 = printed
        .lines()
        .find_map(|l| l.strip_prefix("ncclGetUniqueId rc="))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{printed}"));
    assert_ne!(rc, 0, "{printed}");
    let code = ncclshim_diagnose::names::nccl_result_name(rc).unwrap();
    // A rank retrying its rendezvous: each failure counts, though the model the report reads
    // keeps only the first and the last of such a run.
    let retried = preloaded(&nccl_fail, &dumps)
        .arg(format!("retry {RETRIES}"))
        .env("NCCL_SOCKET_IFNAME", "bad0")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&retried.stdout);
    assert!(
        printed.contains(&format!("failed {RETRIES} of {RETRIES}")),
        "{printed}"
    );
    let mut held = Kid(preloaded(&nccl_fail, &dumps)
        .arg("hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap());
    let held_pid = held.0.id().to_string();
    // ncclGetVersion's line, then "ready".
    let _ = first_line(&mut held);

    let mut ranks = [
        double_rank(&job_rank, &dumps, 0, "block"),
        double_rank(&job_rank, &dumps, 1, "sleep"),
    ];
    assert_eq!(first_line(&mut ranks[1]).trim(), "ready");
    let pids: Vec<String> = ranks.iter().map(|k| k.0.id().to_string()).collect();

    let (_exporter, addr) = start_exporter(&dumps);
    let python = test_python();
    // The stall is called once the ranks have been quiet for --stall-after (1 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (fams, text) = loop {
        let (status, content_type, text) = get(&addr, "/metrics");
        assert_eq!(status, 200, "{text}");
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        let fams = parse_with_prometheus_client(&python, &text);
        if value(&fams, "ncclshim_comm_stalled", &[("pid", &pids[1])]) == Some(1.0) {
            break (fams, text);
        }
        assert!(
            Instant::now() < deadline,
            "no stall after a minute:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };

    // Every family has HELP and TYPE, a ncclshim_ name and a unit or _total where it counts.
    for f in &fams {
        let name = f["family"].as_str().unwrap();
        assert!(name.starts_with("ncclshim_"), "{name}");
        assert!(!f["help"].as_str().unwrap().is_empty(), "{name}");
        if f["type"] == "counter" {
            assert!(
                text.contains(&format!("# TYPE {name}_total counter")),
                "{name}"
            );
        }
    }
    // The failed processes: their failed calls by result name; they ended.
    let mut failed = samples(&fams, "ncclshim_failed_calls_total", &[("code", code)]);
    failed.sort_by(|a, b| {
        a["value"]
            .as_f64()
            .partial_cmp(&b["value"].as_f64())
            .unwrap()
    });
    let counts: Vec<f64> = failed
        .iter()
        .map(|s| s["value"].as_f64().unwrap())
        .collect();
    assert_eq!(counts, [1.0, RETRIES as f64], "{text}");
    for s in &failed {
        assert_eq!(s["labels"]["job"], RUN_ID);
        assert_eq!(s["labels"]["rank"], "");
        let pid = s["labels"]["pid"].as_str().unwrap();
        assert_eq!(
            value(&fams, "ncclshim_process_alive", &[("pid", pid)]),
            Some(0.0)
        );
    }
    // The held process runs and failed nothing.
    assert_eq!(
        value(&fams, "ncclshim_process_alive", &[("pid", &held_pid)]),
        Some(1.0)
    );
    assert!(samples(&fams, "ncclshim_failed_calls_total", &[("pid", &held_pid)]).is_empty());
    // The two ranks: rank 0 inside its all-reduce OPS+1, rank 1 stopped after OPS; both held
    // by the stall, which waits for rank 1.
    for (pid, rank, issued) in [(&pids[0], "0", OPS + 1), (&pids[1], "1", OPS)] {
        let l = [("pid", pid.as_str()), ("rank", rank), ("job", RUN_ID)];
        assert_eq!(
            value(&fams, "ncclshim_process_alive", &l),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(&fams, "ncclshim_comm_ops_issued_total", &l),
            Some(issued as f64),
            "{text}"
        );
        assert_eq!(
            value(&fams, "ncclshim_comm_ops_completed_total", &l),
            Some(OPS as f64),
            "{text}"
        );
        assert_eq!(
            value(&fams, "ncclshim_comm_stalled", &l),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(&fams, "ncclshim_comm_stalled_waiting_for_rank", &l),
            Some(1.0),
            "{text}"
        );
        let comm = &samples(&fams, "ncclshim_comm_stalled", &l)[0]["labels"]["comm"];
        assert!(comm.as_str().unwrap().starts_with("0x"), "{comm}");
    }
    let in_flight = value(
        &fams,
        "ncclshim_comm_in_flight_age_seconds",
        &[("pid", &pids[0])],
    )
    .unwrap();
    assert!(in_flight >= 1.0, "{text}");
    assert_eq!(
        value(
            &fams,
            "ncclshim_comm_in_flight_age_seconds",
            &[("pid", &pids[1])]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&fams, "ncclshim_exporter_dumps", &[]),
        Some(5.0),
        "{text}"
    );

    // Nothing changed since: the next scrape parses no dump again.
    let (_, _, again) = get(&addr, "/metrics");
    let again = parse_with_prometheus_client(&python, &again);
    assert_eq!(
        value(&again, "ncclshim_exporter_dumps_parsed", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(&again, "ncclshim_comm_stalled", &[("pid", &pids[1])]),
        Some(1.0)
    );

    // A node that holds rank 0 alone (its peer on another node): rank 0 waits inside NCCL,
    // stalled all the same; which rank it waits for is not this node's to tell.
    let alone = tmp.path().join("rank0-node");
    std::fs::create_dir_all(&alone).unwrap();
    for e in std::fs::read_dir(&dumps).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name.contains(&format!(".{}.", pids[0])) {
            std::fs::copy(&p, alone.join(&name)).unwrap();
        }
    }
    let (_node, node_addr) = start_exporter(&alone);
    let node = parse_with_prometheus_client(&python, &get(&node_addr, "/metrics").2);
    let l = [("pid", pids[0].as_str()), ("rank", "0")];
    assert_eq!(value(&node, "ncclshim_comm_stalled", &l), Some(1.0));
    assert_eq!(
        value(&node, "ncclshim_comm_stalled_waiting_for_rank", &l),
        None
    );
    assert_eq!(value(&node, "ncclshim_exporter_dumps", &[]), Some(1.0));

    let (status, content_type, page) = get(&addr, "/");
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"), "{content_type}");
    assert!(page.contains("/metrics"), "{page}");
    assert_eq!(get(&addr, "/nothing").0, 404);
    drop(held);
}

#[test]
fn the_exporter_stops_on_sigterm_and_sigint() {
    let tmp = tempfile::tempdir().unwrap();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (mut exporter, addr) = start_exporter(tmp.path());
        assert_eq!(get(&addr, "/metrics").0, 200);
        // SAFETY: a signal to our own child, not reaped yet.
        unsafe { libc::kill(exporter.0.id() as i32, sig) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = exporter.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "still serving after signal {sig}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "signal {sig}");
    }
}

#[test]
fn a_bad_directory_or_address_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |listen: &str, dir: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
            .args(["exporter", "--listen", listen])
            .arg(dir)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run("127.0.0.1:0", &tmp.path().join("missing"));
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("missing"), "{err}");

    let (_first, addr) = start_exporter(tmp.path());
    let (code, err) = run(&addr, tmp.path());
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}
