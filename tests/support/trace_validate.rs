//! A checker for the rules Perfetto's JSON importer (Chrome "Trace Event Format") documents or
//! enforces, so tests can hold every trace `ncclshim trace` writes to them:
//! - the file is a JSON object with a `traceEvents` array, or a bare array of events;
//! - each event is an object with a known `ph`, an integer `pid` (and `tid` where the phase
//!   draws on a thread track) that fits in 32 bits, a finite `ts` (all but metadata), a `name`
//!   where the phase needs one, `dur >= 0` on complete (`X`) events, `s` in `g`/`p`/`t` on instants;
//! - on each (pid, tid) track, slices (`X`, `B`…`E` pairs, and thread instants, which the
//!   importer turns into zero-length slices) nest strictly: a slice starting inside another
//!   ends at or before its end; `E` closes the innermost open `B`, and every `B` is closed;
//! - async `b`/`e` pair up by (cat, id, name), with `e` not before its `b`;
//! - events are sorted by `ts` on each track, and a track's metadata comes before its events;
//! - metadata (`M`) is one of the known names with its argument (`args.name` for names,
//!   an integer `args.sort_index` for sort indices).
//!
//! Times are compared in integer nanoseconds (`ts` and `dur` are microseconds, rounded), as
//! the importer stores them.
//!
//! Test support, never shipped: `#[path]`-included by the trace crate's tests
//! (`trace/src/lib.rs`, `trace/tests/validate.rs`, which tests it), the CLI's integration tests
//! and the lab (`tests/lab/conformance.rs`).

use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a valid trace holds, for tests that want to say more than "valid".
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub events: usize,
    pub slices: usize,
    pub instants: usize,
    pub metadata: usize,
    /// Distinct (pid, tid) tracks that hold events other than metadata.
    pub tracks: usize,
}

/// At most this many problems are listed (then a count of the rest).
const MAX_PROBLEMS: usize = 40;

/// Checks `trace` against the importer's rules; every problem found, by event index.
pub fn validate(trace: &Value) -> Result<Summary, Vec<String>> {
    let events = match trace {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("traceEvents") {
            Some(Value::Array(a)) => a,
            _ => return Err(vec!["the top-level object has no traceEvents array".into()]),
        },
        _ => return Err(vec!["a trace is a JSON object or array".into()]),
    };
    let mut v = Validator::default();
    for (i, e) in events.iter().enumerate() {
        v.event(i, e);
    }
    v.finish();
    if v.problems.is_empty() {
        v.summary.events = events.len();
        v.summary.tracks = v.tracks.len();
        Ok(v.summary)
    } else {
        let more = v.problems.len().saturating_sub(MAX_PROBLEMS);
        v.problems.truncate(MAX_PROBLEMS);
        if more > 0 {
            v.problems.push(format!("... and {more} more"));
        }
        Err(v.problems)
    }
}

/// One entry of a track's stack of open slices.
#[derive(Debug, Clone, Copy)]
enum Open {
    /// A complete slice (or instant) ending at this time.
    Until(i128),
    /// A `B` waiting for its `E`, opened at this event index.
    Begun(usize),
}

#[derive(Default)]
struct Track {
    last_ts: Option<i128>,
    stack: Vec<Open>,
}

#[derive(Default)]
struct Validator {
    problems: Vec<String>,
    summary: Summary,
    tracks: HashMap<(i64, i64), Track>,
    /// Process tracks (process-scoped instants): last ts per pid.
    process_ts: HashMap<i64, i128>,
    /// Pids / tracks that already had a non-metadata event.
    pids_with_events: HashSet<i64>,
    /// Open async slices by (cat, id, name): their begin times.
    async_open: BTreeMap<(String, String, String), Vec<i128>>,
}

/// ncclshim's own rule beside the importer's: a slice still in flight at the end of its dump
/// (`args.state` = `in_flight_state`: the trace's `ncclshim_trace::IN_FLIGHT_STATE`) is never
/// 0-length, which a viewer would show as nothing where the hang is. Every such slice that
/// breaks it, by event index.
pub fn in_flight_slices_have_length(trace: &Value, in_flight_state: &str) -> Vec<String> {
    let Some(events) = trace["traceEvents"].as_array() else {
        return Vec::new();
    };
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["ph"] == "X" && e["args"]["state"] == in_flight_state)
        .filter(|(_, e)| e["dur"].as_f64().is_none_or(|d| d <= 0.0))
        .map(|(i, e)| format!("event {i}: in flight at the end but 0-length: {e}"))
        .collect()
}

fn ns(x: f64) -> i128 {
    (x * 1000.0).round() as i128
}

/// An id that fits Perfetto's 32-bit pid/tid.
fn id32(v: Option<&Value>) -> Result<i64, &'static str> {
    match v {
        None => Err("missing"),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(x) if (0..=i64::from(i32::MAX)).contains(&x) => Ok(x),
            _ => Err("not an integer in 0..=2^31-1"),
        },
        Some(_) => Err("not an integer"),
    }
}

impl Validator {
    fn bad(&mut self, i: usize, msg: impl std::fmt::Display) {
        self.problems.push(format!("event {i}: {msg}"));
    }

    fn event(&mut self, i: usize, e: &Value) {
        let Some(o) = e.as_object() else {
            return self.bad(i, "not an object");
        };
        let Some(ph) = o.get("ph").and_then(Value::as_str) else {
            return self.bad(i, "no ph");
        };
        let pid = match id32(o.get("pid")) {
            Ok(p) => p,
            Err(why) => return self.bad(i, format_args!("pid {why}")),
        };
        let name = o.get("name").and_then(Value::as_str);
        if ph == "M" {
            return self.metadata(i, pid, name, o);
        }
        self.pids_with_events.insert(pid);
        let ts = match o.get("ts").and_then(Value::as_f64) {
            Some(t) if t.is_finite() => ns(t),
            _ => return self.bad(i, "ts missing or not a finite number"),
        };
        if !matches!(ph, "X" | "B" | "E" | "i" | "I" | "b" | "e" | "n" | "C") {
            return self.bad(
                i,
                format_args!("phase {ph:?} is not one this checker knows"),
            );
        }
        if ph != "E" && name.is_none() {
            return self.bad(i, format_args!("{ph} event without a name"));
        }
        let scope = o.get("s").and_then(Value::as_str).unwrap_or("t");
        if matches!(ph, "i" | "I") && !matches!(scope, "g" | "p" | "t") {
            return self.bad(i, format_args!("instant scope {scope:?}"));
        }
        if matches!(ph, "i" | "I") && scope != "t" {
            self.summary.instants += 1;
            let last = self.process_ts.entry(pid).or_insert(ts);
            if ts < *last {
                self.bad(i, "process instant out of time order");
            }
            let last = self.process_ts.get_mut(&pid).unwrap();
            *last = (*last).max(ts);
            return;
        }
        if ph == "C" {
            return;
        }
        if matches!(ph, "b" | "e" | "n") {
            return self.async_event(i, ph, ts, name.unwrap_or(""), o);
        }
        let tid = match id32(o.get("tid")) {
            Ok(t) => t,
            Err(why) => return self.bad(i, format_args!("tid {why}")),
        };
        let dur = if ph == "X" {
            match o.get("dur").and_then(Value::as_f64) {
                Some(d) if d.is_finite() && d >= 0.0 => Some(ns(d)),
                _ => return self.bad(i, "X without a finite dur >= 0"),
            }
        } else if matches!(ph, "i" | "I") {
            Some(0)
        } else {
            None
        };
        let track = self.tracks.entry((pid, tid)).or_default();
        let out_of_order = track.last_ts.is_some_and(|l| ts < l);
        track.last_ts = Some(ts);
        let mut problem: Option<String> = None;
        match (ph, dur) {
            ("E", _) => match track.stack.pop() {
                Some(Open::Begun(_)) => {}
                Some(Open::Until(end)) if end <= ts => {
                    // Closed slices under the B are done; find the B.
                    while let Some(Open::Until(_)) = track.stack.last() {
                        track.stack.pop();
                    }
                    if !matches!(track.stack.pop(), Some(Open::Begun(_))) {
                        problem = Some("E without an open B".into());
                    }
                }
                Some(Open::Until(_)) => {
                    problem = Some("E inside a complete slice that has not ended".into());
                }
                None => problem = Some("E without an open B".into()),
            },
            ("B", _) => {
                Self::pop_ended(&mut track.stack, ts);
                track.stack.push(Open::Begun(i));
                self.summary.slices += 1;
            }
            (_, Some(d)) => {
                Self::pop_ended(&mut track.stack, ts);
                let end = ts + d;
                if let Some(Open::Until(parent_end)) = track.stack.last() {
                    if end > *parent_end {
                        problem = Some(format!(
                            "slice [{ts}, {end}] ns overlaps its enclosing slice ending at {parent_end} ns on track ({pid}, {tid}) without nesting"
                        ));
                    }
                }
                if problem.is_none() {
                    track.stack.push(Open::Until(end));
                }
                if ph == "X" {
                    self.summary.slices += 1;
                } else {
                    self.summary.instants += 1;
                }
            }
            _ => {}
        }
        if out_of_order {
            self.bad(i, format_args!("ts out of order on track ({pid}, {tid})"));
        }
        if let Some(p) = problem {
            self.bad(i, p);
        }
    }

    fn pop_ended(stack: &mut Vec<Open>, ts: i128) {
        while let Some(Open::Until(end)) = stack.last() {
            if *end <= ts {
                stack.pop();
            } else {
                break;
            }
        }
    }

    fn async_event(
        &mut self,
        i: usize,
        ph: &str,
        ts: i128,
        name: &str,
        o: &serde_json::Map<String, Value>,
    ) {
        let Some(cat) = o.get("cat").and_then(Value::as_str) else {
            return self.bad(i, "async event without cat");
        };
        let id = match o.get("id").or_else(|| o.get("id2")) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(v @ Value::Object(_)) => v.to_string(),
            _ => return self.bad(i, "async event without id"),
        };
        let key = (cat.to_owned(), id, name.to_owned());
        match ph {
            "b" => {
                self.async_open.entry(key).or_default().push(ts);
                self.summary.slices += 1;
            }
            "e" => match self.async_open.get_mut(&key).and_then(Vec::pop) {
                Some(begin) if begin <= ts => {}
                Some(_) => self.bad(i, "async e before its b"),
                None => self.bad(i, format_args!("async e without a b for {key:?}")),
            },
            _ => self.summary.instants += 1,
        }
    }

    fn metadata(
        &mut self,
        i: usize,
        pid: i64,
        name: Option<&str>,
        o: &serde_json::Map<String, Value>,
    ) {
        self.summary.metadata += 1;
        let args = o.get("args");
        let thread = match name {
            Some("process_name" | "process_labels" | "process_sort_index") => false,
            Some("thread_name" | "thread_sort_index") => true,
            other => return self.bad(i, format_args!("unknown metadata name {other:?}")),
        };
        let ok = match name {
            Some("process_name" | "thread_name" | "process_labels") => args
                .and_then(|a| {
                    a.get(if name == Some("process_labels") {
                        "labels"
                    } else {
                        "name"
                    })
                })
                .is_some_and(Value::is_string),
            _ => args
                .and_then(|a| a.get("sort_index"))
                .is_some_and(|v| v.is_i64()),
        };
        if !ok {
            self.bad(i, format_args!("metadata {name:?} without its argument"));
        }
        if thread {
            let tid = match id32(o.get("tid")) {
                Ok(t) => t,
                Err(why) => return self.bad(i, format_args!("tid {why}")),
            };
            if self
                .tracks
                .get(&(pid, tid))
                .is_some_and(|t| t.last_ts.is_some())
            {
                self.bad(i, "thread metadata after the track's events");
            }
        } else if self.pids_with_events.contains(&pid) {
            self.bad(i, "process metadata after the process's events");
        }
    }

    fn finish(&mut self) {
        let mut unclosed = Vec::new();
        for ((pid, tid), t) in &self.tracks {
            for open in &t.stack {
                if let Open::Begun(i) = open {
                    unclosed.push(format!(
                        "event {i}: B on track ({pid}, {tid}) is never closed by an E"
                    ));
                }
            }
        }
        unclosed.sort();
        self.problems.extend(unclosed);
        for (key, open) in &self.async_open {
            if !open.is_empty() {
                self.problems
                    .push(format!("async b without an e for {key:?}"));
            }
        }
    }
}
