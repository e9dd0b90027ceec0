//! The hot path and the general path write the same records. Under the default mask a Coll or
//! P2p start, and an operation's GPU-done record, normally take the unguarded hot path
//! (`src/hot.rs`); the guarded general path takes over when the hot path declines: the
//! thread has no ring yet, or a name is seen for the first time. This drives the plugin
//! through its exported `ncclProfiler_v7` table so that each kind of record is written once
//! by each path, checks which path wrote it, and compares the records field by field.

mod v7driver;

use nccl_profiler_ncclshim::abi::{self, CollV5, KernelCh, P2pV5};
use nccl_profiler_ncclshim::hot;
use nccl_profiler_ncclshim::v7;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{CallId, RecordKind};
use ncclshim_format::reader::{read_dump, Record};
use std::ffi::c_void;
use v7driver::{init, start, state, stop, zeroed, H};

/// Names as NCCL passes them: pointers to static literals. Each op kind uses its own copies,
/// so that its first start meets names the cache has not seen.
struct Names {
    func: &'static std::ffi::CStr,
    datatype: &'static std::ffi::CStr,
}

fn coll(seq: u64, n: &Names, sym: bool) -> v7::Descr {
    let mut d: v7::Descr = zeroed();
    d.type_ = u64::from(abi::event::COLL);
    d.u.coll.base = CollV5 {
        seq_number: seq,
        func: n.func.as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 4096,
        root: -1,
        datatype: n.datatype.as_ptr(),
        n_channels: 2,
        n_warps: 16,
        algo: c"TREE".as_ptr(),
        proto: c"LL128".as_ptr(),
        parent_group: std::ptr::null_mut(),
    };
    d.u.coll.is_sym_coll = sym;
    d
}

fn p2p(n: &Names, peer: i32) -> v7::Descr {
    let mut d: v7::Descr = zeroed();
    d.type_ = u64::from(abi::event::P2P);
    d.u.p2p.base = P2pV5 {
        func: n.func.as_ptr(),
        buff: 0x7000 as *mut c_void,
        datatype: n.datatype.as_ptr(),
        count: 333,
        peer,
        n_channels: 2,
        parent_group: std::ptr::null_mut(),
    };
    d
}

/// The operation's two kernel channels, started, stopped on the GPU and stopped, from the
/// calling thread (NCCL's proxy thread).
fn run_channels(ctx: H, op: H, base: u64) {
    for ch in 0..2u8 {
        let mut d: v7::Descr = zeroed();
        d.type_ = u64::from(abi::event::KERNEL_CH);
        d.parent_obj = op.0 as *mut c_void;
        d.u.v6.v5.kernel_ch = KernelCh {
            channel_id: ch,
            p_timer: base + u64::from(ch),
        };
        let k = start(ctx, &mut d);
        state(k, abi::state::KERNEL_CH_STOP, base + 500 + u64::from(ch));
        stop(k);
    }
}

/// Which path each step took, printed for the parent: `path <step> <general|hot>`.
fn step(name: &str, f: impl FnOnce()) {
    let before = hot::general_path_count();
    f();
    let path = if hot::general_path_count() > before {
        "general"
    } else {
        "hot"
    };
    println!("path {name} {path}");
}

fn child() {
    let ctx = init(0x407_0000_0000_0001, c"hot-path", 2);
    let coll_names = Names {
        func: c"AllReduce",
        datatype: c"ncclBfloat16",
    };
    let p2p_names = Names {
        func: c"Send",
        datatype: c"ncclInt8",
    };
    // The user thread: a fresh thread, whose first start finds no ring.
    let ops = std::thread::spawn(move || {
        let mut ops = Vec::new();
        step("coll-no-ring", || {
            ops.push(start(ctx, &mut coll(1, &coll_names, true)))
        });
        step("coll-hot", || {
            ops.push(start(ctx, &mut coll(2, &coll_names, true)))
        });
        step("p2p-new-names", || {
            ops.push(start(ctx, &mut p2p(&p2p_names, 1)))
        });
        step("p2p-hot", || ops.push(start(ctx, &mut p2p(&p2p_names, 1))));
        for &op in &ops {
            stop(op);
        }
        ops
    })
    .join()
    .unwrap();
    // The proxy thread, also fresh: its first GPU-done record finds no ring.
    std::thread::spawn(move || {
        for (i, name) in ["done-no-ring", "done-hot", "done-p2p-1", "done-p2p-2"]
            .iter()
            .enumerate()
        {
            step(name, || run_channels(ctx, ops[i], 10_000 * (i as u64 + 1)));
        }
    })
    .join()
    .unwrap();
}

/// The fields two records written for the same kind of event must share (everything but
/// when, where, and the arguments that differ by design).
fn shape(
    r: &Record,
    skip_args: &[usize],
) -> (Option<RecordKind>, Option<CallId>, u32, u64, Vec<u64>) {
    let args = r
        .args
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip_args.contains(i))
        .map(|(_, v)| *v)
        .collect();
    (r.kind(), r.call(), r.flags, r.comm, args)
}

#[test]
fn hot_and_general_paths_write_the_same_records() {
    if v7driver::is_child() {
        child();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (stdout, dump) = v7driver::run_child(
        "hot_and_general_paths_write_the_same_records",
        dir.path(),
        None,
        &[],
    );
    // Each pair below is one record from each path; otherwise the comparison proves nothing.
    let paths: Vec<(&str, &str)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("path "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert_eq!(
        paths,
        [
            ("coll-no-ring", "general"),
            ("coll-hot", "hot"),
            ("p2p-new-names", "general"),
            ("p2p-hot", "hot"),
            ("done-no-ring", "general"),
            ("done-hot", "hot"),
            ("done-p2p-1", "hot"),
            ("done-p2p-2", "hot"),
        ]
    );

    let d = read_dump(&dump).unwrap();
    assert_eq!(d.summary.torn, 0);
    let starts = |call| -> Vec<&Record> {
        d.records
            .iter()
            .filter(|r| r.kind() == Some(RecordKind::ProfStart) && r.call() == Some(call))
            .collect()
    };
    let (colls, p2ps) = (starts(CallId::ProfColl), starts(CallId::ProfP2p));
    assert_eq!((colls.len(), p2ps.len()), (2, 2));
    // Coll: everything but the sequence number (arg 2) is the same, flags included.
    assert_eq!(shape(colls[0], &[2]), shape(colls[1], &[2]));
    assert_eq!((colls[0].args[2], colls[1].args[2]), (1, 2));
    assert_eq!(shape(p2ps[0], &[]), shape(p2ps[1], &[]));
    for r in colls.iter().chain(&p2ps) {
        let want = slot_flags::COMPLETES_IN_PLACE | slot_flags::ENDS_AT_GPU_DONE;
        assert_eq!(r.flags, want, "{r:?}");
        assert_eq!(r.comm, 0x407_0000_0000_0001);
        assert!(
            r.t_exit_ns.is_none(),
            "open until its GPU-done record: {r:?}"
        );
    }
    // v7's symmetric-kernel flag and the names came through the hot path too.
    assert_eq!(colls[1].args[8] >> 16 & 0xff, 1);
    assert_ne!(colls[1].args[3], 0, "func code");
    assert_ne!(p2ps[1].args[4], 0, "datatype code");

    // GPU-done records: one per operation, naming it, with its channels' span.
    let ops: Vec<&Record> = colls.iter().chain(&p2ps).copied().collect();
    for (i, op) in ops.iter().enumerate() {
        let dones: Vec<_> = d
            .records
            .iter()
            .filter_map(Record::gpu_done)
            .filter(|g| g.op == op.slot_ref().encode())
            .collect();
        let base = 10_000 * (i as u64 + 1);
        assert_eq!(dones.len(), 1, "{op:?}");
        assert_eq!(
            (dones[0].gpu_start, dones[0].gpu_stop, dones[0].channels),
            (base, base + 501, 2)
        );
    }
    let done_records: Vec<&Record> = d
        .records
        .iter()
        .filter(|r| r.gpu_done().is_some())
        .collect();
    // The general path's and the hot path's GPU-done records differ only in what they name,
    // the GPU times, and whether they read the clock: that is sampled by in-flight entry
    // (one operation in 64), not chosen by the path.
    let (general, hot) = (done_records[0], done_records[1]);
    let unsampled = |r: &Record| {
        let (kind, call, flags, comm, args) = shape(r, &[0, 2, 3]);
        (kind, call, flags & !slot_flags::TIME_OF_NAMED, comm, args)
    };
    assert_eq!(unsampled(general), unsampled(hot));
    assert_eq!(general.call(), Some(CallId::ProfColl));
    assert_eq!(done_records[3].call(), Some(CallId::ProfP2p));
}
