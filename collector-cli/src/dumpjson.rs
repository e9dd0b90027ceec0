//! `ncclshim dump FILE`: every record of one dump as JSON lines, with names instead of ids, so a
//! dump can be read with `jq` or diffed without this tool's analysis getting in the way.

use ncclshim_diagnose::names::rc_name;
use ncclshim_format::reader::{Blob, Dump, DumpStream, Record, Source, Warning};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{BlobKind, CallId, RecordKind};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::io::Write;

/// The decoded blob: JSON kinds parsed (falling back to text when the JSON is bad), text as text.
pub fn blob_value(blob: &Blob) -> Value {
    let kind = blob.kind();
    let kind_name = kind
        .map(|k| k.name().to_owned())
        .unwrap_or_else(|| format!("kind_{}", blob.kind_raw));
    let mut o = Map::new();
    o.insert("offset".into(), json!(blob.offset));
    o.insert("kind".into(), json!(kind_name));
    match kind {
        Some(k) if k.is_json() => match serde_json::from_slice::<Value>(&blob.bytes) {
            Ok(v) => {
                o.insert("json".into(), v);
            }
            Err(e) => {
                o.insert("text".into(), json!(blob.text()));
                o.insert("json_error".into(), json!(e.to_string()));
            }
        },
        Some(BlobKind::ProfAggregates) => {
            // Binary counters updated in place by the profiler, decoded with the layout the
            // plugin writes with (only the non-empty cells).
            o.insert("bytes".into(), json!(blob.bytes.len()));
            if let Some(a) = ncclshim_format::aggregates::decode(&blob.bytes) {
                let cells: Vec<Value> = a
                    .cells
                    .iter()
                    .map(|c| {
                        json!({
                            "func": ncclshim_diagnose::profnames::func_name(u64::from(c.func)),
                            "bucket_floor": c.bucket_floor,
                            "count": c.count,
                            "bytes": c.bytes,
                            "timed_count": c.timed_count,
                            "timed_bytes": c.timed_bytes,
                            "gpu_ns_sum": c.gpu_ns_sum,
                            "gpu_ns_max": c.gpu_ns_max,
                        })
                    })
                    .collect();
                o.insert(
                    "aggregates".into(),
                    json!({
                        "comm_id": format!("{:#x}", a.comm_id),
                        "rank": a.rank,
                        "nranks": a.nranks,
                        "nnodes": a.nnodes,
                        "abi": a.abi,
                        "cells": cells,
                    }),
                );
            }
        }
        _ => {
            o.insert("text".into(), json!(blob.text()));
        }
    }
    Value::Object(o)
}

/// One record as a JSON object.
pub fn record_value(dump: &Dump, r: &Record) -> Value {
    let thread = dump
        .rings
        .iter()
        .find(|ri| ri.index == r.ring)
        .map(|ri| ri.thread_name.clone())
        .unwrap_or_default();
    let kind = r
        .kind()
        .map(|k| k.name().to_owned())
        .unwrap_or_else(|| format!("kind_{}", r.kind_raw));
    let call = r.call();
    let is_cuda = r.flags & slot_flags::RC_IS_CUDA != 0 || call.is_some_and(CallId::is_cuda);
    let mut args = Map::new();
    let names = field_names(r);
    for (i, v) in r.args.iter().enumerate() {
        match names.get(i) {
            Some(name) => {
                args.insert((*name).to_owned(), json!(v));
            }
            // Past the named fields an argument is unused; one that is set anyway is shown.
            None if *v != 0 || r.kind().is_none() || call.is_none() => {
                args.insert(format!("a{i}"), json!(v));
            }
            None => {}
        }
    }
    // Only calls carry a return code; for other kinds rc is whatever the writer left there.
    let rc_name_v = if r.kind() == Some(RecordKind::Call) {
        json!(rc_name(r.rc, is_cuda))
    } else {
        Value::Null
    };
    let blob = if r.blob != 0 {
        dump.blob(r.blob)
            .map(blob_value)
            .unwrap_or_else(|| json!({"offset": r.blob, "missing": true}))
    } else {
        Value::Null
    };
    let mut v = json!({
        "seq": r.seq,
        "ring": r.ring,
        "tid": r.tid,
        "thread": thread,
        "kind": kind,
        "call": r.call_name(),
        "t_enter_ns": r.t_enter_ns,
        "t_exit_ns": r.t_exit_ns,
        "in_flight": r.in_flight(),
        "rc": r.rc,
        "rc_name": rc_name_v,
        "flags": r.flags,
        "has_error_text": r.flags & slot_flags::HAS_ERROR_TEXT != 0,
        "comm": format!("{:#x}", r.comm),
        "args": args,
        "blob": blob,
    });
    if r.kind() == Some(RecordKind::ProfStart) {
        if let Some(names) = call.and_then(|c| profiler_names(c, &r.args)) {
            v["names"] = names;
        }
        // What stop/state records and children put in `args[0]` / `parent` to name this event.
        v["ref"] = json!(r.slot_ref().encode());
    }
    v
}

/// `args[0..]` of a `prof_stop` record: the start record it stops.
pub const PROF_STOP_FIELDS: &[&str] = &["start_ref"];
/// `args[0..]` of a `prof_state` record: NCCL's state and its values.
pub const PROF_STATE_FIELDS: &[&str] = &["start_ref", "state", "value", "value2"];
/// `args[0..]` of a `prof_state` record with state [`PROF_STATE_GPU_DONE`] (the operation's
/// GPU span over its kernel channels).
///
/// [`PROF_STATE_GPU_DONE`]: ncclshim_format::schema::PROF_STATE_GPU_DONE
pub const GPU_DONE_FIELDS: &[&str] =
    &["op_ref", "state", "gpu_start_ns", "gpu_stop_ns", "channels"];

/// The names of a record's `args[0..]`, by record kind (`docs/format.md`, "Fields per record
/// kind"): calls, start records, communicator facts, snapshots and recorder events are named by
/// their call id; stop and state records by their own layout, whatever event type their call
/// id names (a GPU-done record is a `Coll`/`P2p` state, not a collective's start); an `event`
/// record of an API call (the `ncclConfig_t` written before an init) has no arguments. Empty
/// for an unknown kind or call id.
pub fn field_names(r: &Record) -> &'static [&'static str] {
    let Some(call) = r.call() else {
        return &[];
    };
    match r.kind() {
        Some(RecordKind::ProfStop) => PROF_STOP_FIELDS,
        Some(RecordKind::ProfState) if r.gpu_done().is_some() => GPU_DONE_FIELDS,
        Some(RecordKind::ProfState) => PROF_STATE_FIELDS,
        Some(RecordKind::Event) if (call as u16) < 0x0300 => &[],
        Some(_) => call.arg_names(),
        None => &[],
    }
}

/// The profiler's string codes (function, datatype, algorithm, protocol) as NCCL's names.
fn profiler_names(c: CallId, a: &[u64; 9]) -> Option<Value> {
    use ncclshim_diagnose::profnames::{datatype_name, func_name};
    let (func, dt) = match c {
        CallId::ProfColl | CallId::ProfCeColl => (a[3], a[5]),
        CallId::ProfP2p | CallId::ProfCollApi | CallId::ProfP2pApi => (a[2], a[4]),
        _ => return None,
    };
    let mut v = json!({"func": func_name(func), "datatype": datatype_name(dt)});
    if c == CallId::ProfColl {
        use ncclshim_format::profnames::{unpack_algo_proto, NameTable};
        let (algo, proto) = unpack_algo_proto(a[7]);
        v["algo"] = json!(NameTable::Algo.name_of(algo).unwrap_or("other"));
        v["proto"] = json!(NameTable::Proto.name_of(proto).unwrap_or("other"));
    }
    Some(v)
}

/// Writes a decoded dump as JSON lines: header, rings, records, unreferenced blobs, warnings,
/// summary. `ncclshim dump` streams the same lines with [`write_dump_stream`].
pub fn write_dump_lines(dump: &Dump, out: &mut dyn Write) -> std::io::Result<()> {
    write_head(dump, out)?;
    for r in &dump.records {
        writeln!(out, "{}", record_value(dump, r))?;
    }
    let referenced: HashSet<u64> = dump.records.iter().map(|r| r.blob).collect();
    write_tail(dump, &referenced, &[], out)
}

/// Writes the same lines as [`write_dump_lines`] from a dump read one record at a time: only
/// the line being written is held, whatever the number of records.
pub fn write_dump_stream<S: Source>(
    stream: &DumpStream<S>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let dump = stream.dump();
    write_head(dump, out)?;
    // Only blobs that exist are remembered: the set is bounded by the blobs, not the records.
    let mut referenced = HashSet::new();
    let late = stream.for_each_record(|r| {
        if dump.blobs.contains_key(&r.blob) {
            referenced.insert(r.blob);
        }
        writeln!(out, "{}", record_value(dump, r))
    })?;
    write_tail(dump, &referenced, &late, out)
}

/// The lines before the records: header, then one per ring.
fn write_head(dump: &Dump, out: &mut dyn Write) -> std::io::Result<()> {
    let header = serde_json::to_value(&dump.header).unwrap_or(Value::Null);
    writeln!(
        out,
        "{}",
        json!({ "header": header, "path": dump.path.display().to_string() })
    )?;
    for ring in &dump.rings {
        writeln!(out, "{}", json!({ "ring": ring }))?;
    }
    Ok(())
}

/// The lines after the records: blobs no record points at (snapshots written before any ring
/// existed, say), warnings (the reader's, then `late` ones), the summary.
fn write_tail(
    dump: &Dump,
    referenced: &HashSet<u64>,
    late: &[Warning],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    for b in dump.blobs.values() {
        if !referenced.contains(&b.offset) {
            writeln!(out, "{}", json!({ "blob": blob_value(b) }))?;
        }
    }
    for w in dump.warnings.iter().chain(late) {
        writeln!(out, "{}", json!({ "warning": w }))?;
    }
    writeln!(out, "{}", json!({ "summary": dump.summary }))?;
    Ok(())
}

/// Blob kinds that hold JSON, for callers that want to test a kind without a blob.
pub fn is_json_kind(raw: u16) -> bool {
    BlobKind::from_u16(raw).is_some_and(BlobKind::is_json)
}

#[cfg(test)]
mod tests {
    use super::blob_value;
    use ncclshim_format::BlobKind;

    /// `ncclshim dump` shows a profiler aggregate table decoded, not as a byte count only.
    #[test]
    fn aggregate_tables_are_decoded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = ncclshim_fixtures::synth::Scenario::new(dir.path(), &["n0"]).expect("scenario");
        s.ranks[0].prof_aggregates(0xabc, 2, 0, 7, 6, 4096, 1000);
        drop(s);
        let found: Vec<serde_json::Value> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| ncclshim_format::reader::read_dump(&e.ok()?.path()).ok())
            .flat_map(|d| d.blobs.into_values())
            .filter(|b| b.kind() == Some(BlobKind::ProfAggregates))
            .map(|b| blob_value(&b))
            .collect();
        assert_eq!(found.len(), 1);
        let a = &found[0]["aggregates"];
        assert_eq!(a["comm_id"], "0xabc");
        assert_eq!(a["nranks"], 2);
        assert_eq!(a["cells"][0]["func"], "AllReduce");
        assert_eq!(a["cells"][0]["count"], 7);
        assert_eq!(a["cells"][0]["timed_count"], 6);
        assert_eq!(a["cells"][0]["gpu_ns_sum"], 6000);
    }
}
