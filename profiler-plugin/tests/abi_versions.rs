//! Every profiler ABI version (v1..v7) through the NCCL emulator, in a child process with its
//! own dump directory: load, init (version-specific argument order), all-reduces, a send/recv
//! pair and a grouped batch from several threads, finalize, dlclose, reload for the next
//! version. The parent then reads the dump and checks it against what the emulator emitted.

mod emulator;
mod records;

use emulator::{plugin_path, prof_dumps, read_expect, run_versions, write_expect, Expect};
use nccl_profiler_ncclshim::agg;
use ncclshim_dump::profnames::NameTable;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{BlobKind, CallId, RecordKind};
use ncclshim_format::reader::{read_dump, Dump, Record};
use records::Completion;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const CHILD: &str = "NCCLSHIM_EMU_CHILD_OUT";

/// Runs `test` again in a child process with `env`; returns its dump and expectations.
fn in_child(
    test: &str,
    profile: &str,
    extra: &[(&str, &str)],
) -> (tempfile::TempDir, Dump, Vec<Expect>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("expect.tsv");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &out)
        .env("NCCLSHIM_DIR", dir.path().join("dumps"))
        .env("NCCLSHIM_PROFILE", profile)
        .env_remove("NCCLSHIM_DISABLE");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let st = cmd.output().unwrap();
    assert!(
        st.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&st.stdout),
        String::from_utf8_lossy(&st.stderr)
    );
    let dumps = prof_dumps(&dir.path().join("dumps"));
    assert_eq!(
        dumps.len(),
        1,
        "one process, one profiler dump across all reloads: {dumps:?}"
    );
    let dump = read_dump(&dumps[0]).unwrap();
    let exp = read_expect(&out);
    (dir, dump, exp)
}

fn child_role() -> Option<std::path::PathBuf> {
    std::env::var_os(CHILD).map(Into::into)
}

fn func_code(name: &str) -> u64 {
    u64::from(NameTable::Func.code_of(name.as_bytes()))
}

fn by_call(d: &Dump, kind: RecordKind, call: CallId) -> Vec<&Record> {
    d.records
        .iter()
        .filter(|r| r.kind() == Some(kind) && r.call() == Some(call))
        .collect()
}

/// Checks every operation the emulator issued against the records and the aggregates.
/// `per_channel`: the mask asked for `channels` (one record per kernel channel); otherwise an
/// operation with GPU times (v4+) has one GPU-done record and no KernelCh records.
fn check_ops(d: &Dump, exp: &[Expect], per_channel: bool) {
    let starts: HashMap<u64, &Record> = d
        .records
        .iter()
        .filter(|r| r.kind() == Some(RecordKind::ProfStart))
        .map(|r| (r.slot_ref().encode(), r))
        .collect();
    let done = Completion::of(d);
    let colls = by_call(d, RecordKind::ProfStart, CallId::ProfColl);
    let p2ps = by_call(d, RecordKind::ProfStart, CallId::ProfP2p);
    let mut p2p_used = std::collections::HashSet::new();
    for e in exp {
        let rec = if e.p2p {
            *p2ps
                .iter()
                .find(|r| {
                    r.comm == e.comm_id
                        && r.args[2] == func_code(e.func)
                        && r.args[3] == e.count
                        && !p2p_used.contains(&r.slot_ref().encode())
                })
                .unwrap_or_else(|| panic!("no P2p record for {e:?}"))
        } else {
            *colls
                .iter()
                .find(|r| {
                    r.comm == e.comm_id && r.args[2] == e.seq && r.args[3] == func_code(e.func)
                })
                .unwrap_or_else(|| panic!("no Coll record for {e:?}"))
        };
        p2p_used.insert(rec.slot_ref().encode());
        if !e.p2p {
            assert_eq!(rec.args[4], e.count, "{e:?}");
            assert_eq!(
                NameTable::Datatype.name_of(rec.args[5]),
                Some("ncclFloat32")
            );
            let (algo, proto) = ncclshim_dump::profnames::unpack_algo_proto(rec.args[7]);
            assert_eq!(NameTable::Algo.name_of(algo), Some("RING"), "{e:?}");
            assert_eq!(NameTable::Proto.name_of(proto), Some("SIMPLE"));
            assert_eq!(rec.args[8] & 0xff, u64::from(e.channels));
        }
        let me = rec.slot_ref().encode();
        assert!(done.stopped(rec), "start without stop: {e:?}");
        let kernels: Vec<&&Record> = starts
            .values()
            .filter(|k| k.call() == Some(CallId::ProfKernelCh) && k.args[1] == me)
            .collect();
        let summarized = !per_channel && e.version >= 4;
        if e.version >= 3 && !summarized {
            assert_eq!(
                kernels.len(),
                usize::from(e.channels),
                "KernelCh per channel: {e:?}"
            );
        } else {
            assert!(kernels.is_empty(), "{e:?}: {kernels:?}");
        }
        if summarized {
            match (e.gpu_ns, done.gpu_done(rec)) {
                (Some(gpu), Some(g)) => {
                    assert_eq!(g.gpu_stop - g.gpu_start, gpu, "GPU-done record: {e:?}");
                    assert_eq!(g.channels, u64::from(e.channels), "{e:?}");
                }
                (None, None) => {}
                (want, got) => panic!("{e:?}: expected GPU time {want:?}, GPU-done {got:?}"),
            }
        } else if let Some(gpu) = e.gpu_ns {
            let start = kernels.iter().map(|k| k.args[3]).min().unwrap();
            let stop = kernels
                .iter()
                .map(|k| done.kernel_stop(k).expect("state 22 for each channel"))
                .max()
                .unwrap();
            assert_eq!(stop - start, gpu, "GPU time from the records: {e:?}");
        }
    }
    check_aggregates(d, exp);
}

/// Aggregates: per comm and op, exactly what the emulator issued.
fn check_aggregates(d: &Dump, exp: &[Expect]) {
    let tables: Vec<agg::AggSnapshot> = d
        .blobs
        .values()
        .filter(|b| b.kind() == Some(BlobKind::ProfAggregates))
        .filter_map(|b| agg::decode(&b.bytes))
        .collect();
    let mut want: HashMap<(u64, &str), (u64, u64, u64, u64)> = HashMap::new();
    for e in exp {
        let w = want.entry((e.comm_id, e.func)).or_default();
        w.0 += 1;
        w.1 += e.bytes;
        if let Some(g) = e.gpu_ns {
            w.2 += 1;
            w.3 += g;
        }
    }
    for ((comm, func), (count, bytes, timed, gpu)) in want {
        let t = tables
            .iter()
            .find(|t| t.comm_id == comm)
            .unwrap_or_else(|| panic!("no aggregate table for comm {comm:#x}"));
        let cells: Vec<_> = t
            .cells
            .iter()
            .filter(|c| u64::from(c.func) == func_code(func))
            .collect();
        assert_eq!(
            cells.iter().map(|c| c.count).sum::<u64>(),
            count,
            "{comm:#x} {func}"
        );
        assert_eq!(
            cells.iter().map(|c| c.bytes).sum::<u64>(),
            bytes,
            "{comm:#x} {func}"
        );
        assert_eq!(
            cells.iter().map(|c| c.timed_count).sum::<u64>(),
            timed,
            "{comm:#x} {func}"
        );
        assert_eq!(
            cells.iter().map(|c| c.gpu_ns_sum).sum::<u64>(),
            gpu,
            "{comm:#x} {func}"
        );
        for c in cells {
            assert!(
                c.bytes >= c.count * c.bucket_floor,
                "bucket floor respected"
            );
        }
    }
}

fn check_inits(d: &Dump, exp: &[Expect], mask: u32) {
    let inits = by_call(d, RecordKind::CommInfo, CallId::ProfInit);
    let finals = by_call(d, RecordKind::Event, CallId::ProfFinalize);
    let mut comms: Vec<(u64, u32)> = exp.iter().map(|e| (e.comm_id, e.version)).collect();
    comms.sort();
    comms.dedup();
    for (comm, v) in comms {
        let i = inits
            .iter()
            .find(|r| r.args[0] == comm)
            .unwrap_or_else(|| panic!("no ProfInit naming comm {comm:#x} (v{v})"));
        assert_eq!(i.args[4], u64::from(v));
        let supported = nccl_profiler_ncclshim::abi::event::supported(v);
        assert_eq!(
            i.args[5],
            u64::from(mask & supported),
            "mask written for v{v}"
        );
        if v >= 4 {
            assert_eq!(i.args[2], 2, "nranks");
            let name = d.blob(i.blob).expect("comm name blob");
            assert_eq!(name.kind(), Some(BlobKind::Name));
            assert_eq!(name.text(), format!("emu-{comm:x}"));
        }
        assert!(i.args[6] != 0, "aggregate blob reserved");
        let ctx = i.args[7];
        assert!(
            finals.iter().any(|f| f.args[2] == ctx),
            "finalize for comm {comm:#x}"
        );
    }
}

#[test]
fn every_version_default_mask() {
    if let Some(out) = child_role() {
        let exp = run_versions(&plugin_path(), &[1, 2, 3, 4, 5, 6, 7], 3, false);
        write_expect(&out, &exp);
        return;
    }
    let (_dir, d, exp) = in_child("every_version_default_mask", "default", &[]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.summary.torn, 0);
    assert_eq!(d.summary.lost, 0);
    assert_eq!(
        exp.iter()
            .map(|e| e.version)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        7
    );
    check_inits(&d, &exp, nccl_profiler_ncclshim::mask::DEFAULT_MASK);
    check_ops(&d, &exp, false);
    // The default mask records no API, group, launch or proxy events.
    for r in &d.records {
        if let Some(c) = r.call().filter(|_| r.kind() == Some(RecordKind::ProfStart)) {
            assert!(
                matches!(c, CallId::ProfColl | CallId::ProfP2p | CallId::ProfKernelCh),
                "unexpected {c:?} under the default mask"
            );
        }
    }
    // The emulator stops every event on the thread that started it: stops land in the start
    // records themselves, except on the shared overflow ring (this run has more threads than
    // the dump has rings), where a thread cannot take a record up again and writes a separate
    // one. Kernel channels have no records of their own (v4+: one GPU-done record per
    // operation; v3 reports no GPU times).
    let done = Completion::of(&d);
    assert!(done.stops_in_place > 0 && !done.gpu_done.is_empty());
    assert_eq!(done.kernel_stops_in_place + done.kernel_stop_records, 0);
    // Most GPU-done records carry their operation's start time; the sampled ones read the clock.
    assert!(done.gpu_done.values().any(|g| g.clocked));
    assert!(done.gpu_done.values().any(|g| !g.clocked));
    let shared: std::collections::HashSet<u32> = d
        .rings
        .iter()
        .filter(|r| r.shared)
        .map(|r| r.index)
        .collect();
    for r in &d.records {
        if matches!(r.kind(), Some(RecordKind::ProfStop | RecordKind::ProfState))
            && matches!(r.args[1], 22 | 31 | 0)
        {
            assert!(
                shared.contains(&r.ring),
                "separate stop off the overflow ring: {r:?}"
            );
        }
    }
    assert_eq!(
        done.stop_records,
        d.records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::ProfStart) && shared.contains(&r.ring))
            .filter(|r| r.flags & slot_flags::ENDS_AT_GPU_DONE == 0)
            .count(),
        "every start on the overflow ring, and only those, has a stop record, unless it ends at \
         its GPU-done record"
    );
    // Summarized operations stay open until their GPU-done record: no stop of their own.
    let open: Vec<&Record> = d
        .records
        .iter()
        .filter(|r| r.flags & slot_flags::ENDS_AT_GPU_DONE != 0)
        .collect();
    assert!(!open.is_empty());
    for r in open {
        assert!(r.in_flight(), "{r:?}");
        assert!(done.gpu_done(r).is_some(), "{r:?}");
    }
    // Several threads wrote: two user threads and two proxy threads per version.
    assert!(d.rings.iter().filter(|r| r.records > 0).count() >= 4);
}

#[test]
fn every_version_all_events_with_pxn() {
    if let Some(out) = child_role() {
        let exp = run_versions(&plugin_path(), &[1, 2, 3, 4, 5, 6, 7], 2, true);
        write_expect(&out, &exp);
        return;
    }
    let (_dir, d, exp) = in_child("every_version_all_events_with_pxn", "all", &[]);
    assert_eq!(d.summary.torn, 0);
    check_inits(&d, &exp, nccl_profiler_ncclshim::mask::ALL_MASK);
    check_ops(&d, &exp, true);
    let starts: HashMap<u64, &Record> = d
        .records
        .iter()
        .filter(|r| r.kind() == Some(RecordKind::ProfStart))
        .map(|r| (r.slot_ref().encode(), r))
        .collect();
    // v5+: Coll's parent is its CollApi, whose parent is the GroupApi.
    let v5_colls: Vec<&Record> = by_call(&d, RecordKind::ProfStart, CallId::ProfColl)
        .into_iter()
        .filter(|r| exp.iter().any(|e| e.comm_id == r.comm && e.version >= 5))
        .collect();
    assert!(!v5_colls.is_empty());
    for c in v5_colls {
        let api = starts.get(&c.args[1]).expect("Coll parent recorded");
        assert_eq!(api.call(), Some(CallId::ProfCollApi));
        assert_eq!(api.args[2], c.args[3], "CollApi and Coll agree on func");
        let g = starts.get(&api.args[1]).expect("CollApi parent recorded");
        assert_eq!(g.call(), Some(CallId::ProfGroupApi));
    }
    // v1-v4: Coll's parent is the legacy Group.
    let legacy = by_call(&d, RecordKind::ProfStart, CallId::ProfColl)
        .into_iter()
        .filter(|r| exp.iter().any(|e| e.comm_id == r.comm && e.version <= 4));
    for c in legacy {
        assert_eq!(
            starts.get(&c.args[1]).and_then(|g| g.call()),
            Some(CallId::ProfGroup)
        );
    }
    // GroupApi states 23/24 arrive with NULL args and are recorded.
    assert!(d
        .records
        .iter()
        .any(|r| r.kind() == Some(RecordKind::ProfState) && r.args[1] == 24));
    // PXN: ops of another process are flagged FOREIGN, with their pid, and so are their steps.
    let pid = u64::from(d.header.pid);
    let ops = by_call(&d, RecordKind::ProfStart, CallId::ProfProxyOp);
    let foreign: Vec<_> = ops
        .iter()
        .filter(|r| r.flags & slot_flags::FOREIGN != 0)
        .collect();
    let local: Vec<_> = ops
        .iter()
        .filter(|r| r.flags & slot_flags::FOREIGN == 0)
        .collect();
    assert!(!foreign.is_empty() && !local.is_empty());
    for f in &foreign {
        assert_ne!(f.args[2], pid);
        assert_eq!(f.comm, 0, "a foreign context is never dereferenced");
    }
    for l in &local {
        assert_eq!(l.args[2], pid);
        assert_ne!(l.comm, 0);
    }
    let steps = by_call(&d, RecordKind::ProfStart, CallId::ProfProxyStep);
    assert!(steps.iter().any(|s| s.flags & slot_flags::FOREIGN != 0));
    assert!(steps.iter().any(|s| s.flags & slot_flags::FOREIGN == 0));
}

#[test]
fn the_newest_version_is_probed_first() {
    let p = emulator::Plugin::load(&plugin_path(), None).expect("load");
    assert_eq!(p.version, 7);
    assert_eq!(p.name, "ncclshim");
    for v in 1..=7 {
        assert_eq!(
            emulator::Plugin::load(&plugin_path(), Some(v))
                .unwrap()
                .version,
            v
        );
    }
    assert!(emulator::Plugin::load(&plugin_path(), Some(8)).is_err());
    assert!(emulator::Plugin::load(Path::new("/nonexistent/libnccl-profiler-x.so"), None).is_err());
}

#[test]
fn nccl_derives_our_library_name_from_the_suffix() {
    assert_eq!(
        emulator::nccl_library_names(Some("ncclshim")),
        vec![
            "ncclshim".to_owned(),
            "libnccl-profiler-ncclshim.so".to_owned()
        ]
    );
    assert_eq!(
        emulator::nccl_library_names(Some("/abs/libx.so")),
        vec!["/abs/libx.so".to_owned()]
    );
    assert_eq!(
        emulator::nccl_library_names(None),
        vec!["libnccl-profiler.so".to_owned()]
    );
}

/// `NCCLSHIM_DISABLE=1`: init succeeds, asks NCCL for no events, returns no context, and no
/// file is created: the host sees a plugin that does nothing.
#[test]
fn disabled_by_env_asks_nccl_for_nothing() {
    if std::env::var_os("NCCLSHIM_EMU_DISABLED_CHILD").is_some() {
        let p = emulator::Plugin::load(&plugin_path(), Some(6)).expect("load");
        emulator::MASK.store(-1, std::sync::atomic::Ordering::Relaxed);
        let (rc, ctx) = p.init(0x1234, Some("off"), 1, 2, 0);
        assert_eq!(rc, 0);
        assert!(ctx.is_null());
        assert_eq!(emulator::MASK.load(std::sync::atomic::Ordering::Relaxed), 0);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new(std::env::current_exe().unwrap())
        .args([
            "disabled_by_env_asks_nccl_for_nothing",
            "--exact",
            "--nocapture",
        ])
        .env("NCCLSHIM_EMU_DISABLED_CHILD", "1")
        .env("NCCLSHIM_DISABLE", "1")
        .env("NCCLSHIM_DIR", dir.path().join("dumps"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    assert!(!dir.path().join("dumps").exists() || prof_dumps(&dir.path().join("dumps")).is_empty());
}

/// Rings far smaller than the run: old records are overwritten (and counted as lost), the
/// aggregates still hold every operation.
#[test]
fn aggregates_keep_totals_when_rings_wrap() {
    if let Some(out) = child_role() {
        let exp = run_versions(&plugin_path(), &[6], 12, false);
        write_expect(&out, &exp);
        return;
    }
    let (_dir, d, exp) = in_child(
        "aggregates_keep_totals_when_rings_wrap",
        "default",
        &[("NCCLSHIM_PROFILER_RING_SLOTS", "16")],
    );
    assert!(d.summary.lost > 0, "the rings wrapped");
    check_aggregates(&d, &exp);
}
