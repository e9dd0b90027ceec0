//! `ncclshim dump` names every record's arguments by its own kind (`docs/format.md`, "Fields per
//! record kind"): a profiler GPU-done record is not printed with a collective's field names.
//! Pinned on dumps written here with the real writer and on every committed fixture.

mod support;

use collector_cli::dumpjson::{record_value, write_dump_lines};
use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::{Entry, Recorder};
use ncclshim_format::reader::{read_dump, Dump};
use ncclshim_format::schema::{slot_flags, PROF_STATE_GPU_DONE};
use ncclshim_format::{CallId, RecordKind, WriterKind};
use serde_json::Value;
use std::collections::BTreeSet;

fn arg_keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v["args"].as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// One record of every kind, written by the real writer.
#[test]
fn every_record_kind_is_printed_with_its_own_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = RecorderConfig::defaults(WriterKind::Profiler, dir.path().to_path_buf());
    c.rings = 2;
    c.slots_per_ring = 64;
    c.arena_bytes = 4096;
    let rec = Recorder::create(&c.normalized()).unwrap();
    let ring = rec.claim_ring();
    let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
    e.args[0] = 1024;
    ring.begin(&e).complete(0);
    // The ncclConfig_t event written ahead of an init: an API call id, no arguments.
    ring.instant(&Entry::new(
        RecordKind::Event,
        CallId::NcclCommInitRankConfig,
    ));
    let mut note = Entry::new(RecordKind::Event, CallId::FatalSignal);
    note.args[0] = 11;
    ring.instant(&note);
    let mut snap = Entry::new(RecordKind::Snapshot, CallId::SnapshotTaken);
    snap.args[1] = 3;
    ring.instant(&snap);
    let mut init = Entry::new(RecordKind::CommInfo, CallId::ProfInit);
    init.args[..4].copy_from_slice(&[0xabc, 1, 2, 0]);
    ring.instant(&init);
    let mut coll = Entry::new(RecordKind::ProfStart, CallId::ProfColl);
    coll.flags = slot_flags::ENDS_AT_GPU_DONE;
    coll.args[2] = 7;
    let op = ring.instant(&coll);
    let mut kch = Entry::new(RecordKind::ProfStart, CallId::ProfKernelCh);
    kch.args[2] = 3;
    let k = ring.instant(&kch);
    let mut st = Entry::new(RecordKind::ProfState, CallId::ProfKernelCh);
    st.args[..3].copy_from_slice(&[k.encode(), 22, 1_005_000]);
    ring.instant(&st);
    let mut stop = Entry::new(RecordKind::ProfStop, CallId::ProfKernelCh);
    stop.args[0] = k.encode();
    ring.instant(&stop);
    let mut done = Entry::new(RecordKind::ProfState, CallId::ProfColl);
    done.args[..5].copy_from_slice(&[op.encode(), PROF_STATE_GPU_DONE, 1_000, 9_000, 4]);
    ring.instant(&done);
    let d = read_dump(rec.path()).unwrap();
    let v: Vec<Value> = d.records.iter().map(|r| record_value(&d, r)).collect();
    let by = |kind: &str, call: &str| -> Vec<&Value> {
        v.iter()
            .filter(|r| r["kind"] == kind && r["call"] == call)
            .collect()
    };
    let one = |kind: &str, call: &str| -> &Value {
        let r = by(kind, call);
        assert_eq!(r.len(), 1, "{kind} {call}: {v:#?}");
        r[0]
    };
    assert_eq!(
        arg_keys(one("call", "ncclAllReduce")),
        sorted(CallId::NcclAllReduce.arg_names())
    );
    assert_eq!(
        arg_keys(one("event", "ncclCommInitRankConfig")),
        Vec::<String>::new()
    );
    assert_eq!(one("event", "fatalSignal")["args"]["signo"], 11);
    assert_eq!(
        arg_keys(one("snapshot", "snapshot")),
        sorted(&["reason", "blob_kind"])
    );
    assert_eq!(one("comm_info", "profilerInit")["args"]["comm_hash"], 0xabc);
    assert_eq!(
        arg_keys(one("prof_start", "Coll")),
        sorted(CallId::ProfColl.arg_names())
    );
    let state = one("prof_state", "KernelCh");
    assert_eq!(
        arg_keys(state),
        sorted(&["start_ref", "state", "value", "value2"])
    );
    assert_eq!(state["args"]["start_ref"], k.encode());
    assert_eq!(state["args"]["value"], 1_005_000);
    let stop = one("prof_stop", "KernelCh");
    assert_eq!(arg_keys(stop), ["start_ref"]);
    assert_eq!(
        stop["args"]["start_ref"],
        one("prof_start", "KernelCh")["ref"]
    );
    let gpu = one("prof_state", "Coll");
    assert_eq!(
        arg_keys(gpu),
        sorted(&["op_ref", "state", "gpu_start_ns", "gpu_stop_ns", "channels"])
    );
    assert_eq!(gpu["args"]["op_ref"], one("prof_start", "Coll")["ref"]);
    assert_eq!(gpu["args"]["gpu_start_ns"], 1_000);
    assert_eq!(gpu["args"]["gpu_stop_ns"], 9_000);
    assert_eq!(gpu["args"]["channels"], 4);
}

/// What a record line's `args` must hold, computed from the schema, not from `dumpjson`.
fn expected_keys(r: &ncclshim_format::reader::Record) -> Vec<String> {
    let call = r.call().unwrap();
    match r.kind().unwrap() {
        RecordKind::ProfStop => sorted(&["start_ref"]),
        RecordKind::ProfState if r.args[1] == PROF_STATE_GPU_DONE => {
            sorted(&["op_ref", "state", "gpu_start_ns", "gpu_stop_ns", "channels"])
        }
        RecordKind::ProfState => sorted(&["start_ref", "state", "value", "value2"]),
        RecordKind::Event if (call as u16) < 0x0300 => Vec::new(),
        _ => sorted(call.arg_names()),
    }
}

/// Every committed fixture (the real shim captures, the synthetic scenarios, the profiler
/// plugin's emulated 8-rank jobs): each record line carries exactly its kind's field names.
#[test]
fn committed_fixtures_print_each_record_kind_with_its_own_field_names() {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for dir in support::captures::fixture_dirs() {
        for path in ncclshim_diagnose::load::find_dumps(&dir).unwrap() {
            let d: Dump = read_dump(&path).unwrap();
            let mut out = Vec::new();
            write_dump_lines(&d, &mut out).unwrap();
            let lines: Vec<Value> = out
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).unwrap())
                .filter(|v: &Value| v.get("kind").is_some())
                .collect();
            assert_eq!(lines.len(), d.records.len(), "{}", path.display());
            for (r, line) in d.records.iter().zip(&lines) {
                let mut want = expected_keys(r);
                // Unused arguments that are set anyway are shown under their index.
                for (i, a) in r.args.iter().enumerate().skip(want.len()) {
                    if *a != 0 {
                        want.push(format!("a{i}"));
                    }
                }
                want.sort();
                assert_eq!(arg_keys(line), want, "{}: {line}", path.display());
                let kind = line["kind"].as_str().unwrap().to_owned();
                let gpu_done = r.gpu_done().is_some();
                if gpu_done {
                    assert!(line["args"].get("seq").is_none(), "{line}");
                    assert!(line["args"].get("func").is_none(), "{line}");
                }
                seen.insert(if gpu_done {
                    "prof_state gpu_done".into()
                } else {
                    kind
                });
            }
        }
    }
    // The fixtures between them hold every kind the writers produce today.
    for kind in [
        "call",
        "snapshot",
        "comm_info",
        "event",
        "prof_start",
        "prof_stop",
        "prof_state gpu_done",
    ] {
        assert!(
            seen.contains(kind),
            "no {kind} record in any fixture: {seen:?}"
        );
    }
    eprintln!("record kinds checked: {seen:?}");
}
