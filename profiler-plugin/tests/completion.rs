//! Where a stop lands. A start record is written in flight; the stop (and a kernel's GPU stop
//! time) is written into it in place when the stopping thread can take it up again, and as a
//! separate `prof_stop` / `prof_state` record when it cannot: stopped on another thread, or the
//! start record was overwritten by the ring wrapping. The plugin is driven through its exported
//! `ncclProfiler_v7` table, in a child process with its own dump directory and small rings.

mod records;
mod v7driver;

use nccl_profiler_ncclshim::abi::{self, CollV5, KernelCh};
use nccl_profiler_ncclshim::v7::{self, KernelPhase};
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{CallId, RecordKind};
use ncclshim_format::reader::{read_dump, Record};
use records::Completion;
use v7driver::{init, start, state, stop, zeroed};

const RING_SLOTS: usize = 64;

fn coll(seq: u64) -> v7::Descr {
    let mut d: v7::Descr = zeroed();
    d.type_ = u64::from(abi::event::COLL);
    d.u.coll.base = CollV5 {
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 1024,
        root: -1,
        datatype: c"ncclFloat32".as_ptr(),
        n_channels: 1,
        n_warps: 8,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
        parent_group: std::ptr::null_mut(),
    };
    d
}

fn kernel_ch(channel: u8, p_timer: u64) -> v7::Descr {
    let mut d: v7::Descr = zeroed();
    d.type_ = u64::from(abi::event::KERNEL_CH);
    d.u.v6.v5.kernel_ch = KernelCh {
        channel_id: channel,
        p_timer,
    };
    d
}

fn on_other_thread(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        s.spawn(f).join().expect("other thread");
    });
}

/// The child: every case, in an order that lets the ring wrap over case F's start only.
fn child() {
    let ctx = init(0xc0de_0000_0000_0007, c"completion", 2);
    // F: started, then more records than the ring holds, then stopped.
    let f = start(ctx, &mut coll(99));
    for i in 0..RING_SLOTS as u64 {
        let k = start(ctx, &mut kernel_ch(10, 5_000 + i));
        state(k, abi::state::KERNEL_CH_STOP, 6_000 + i);
        stop(k);
    }
    stop(f);
    // A: started and stopped on this thread.
    let a = start(ctx, &mut coll(1));
    stop(a);
    // B: stopped on another thread.
    let b = start(ctx, &mut coll(2));
    on_other_thread(move || stop(b));
    // C: a kernel channel whose start, stop time and stop all come from this thread.
    let c = start(ctx, &mut kernel_ch(3, 700));
    state(c, abi::state::KERNEL_CH_STOP, 777);
    stop(c);
    // D: its GPU stop time reported on another thread, its stop on this one.
    let dk = start(ctx, &mut kernel_ch(4, 800));
    on_other_thread(move || state(dk, abi::state::KERNEL_CH_STOP, 888));
    stop(dk);
    // E: a v7 kernel phase, all on this thread.
    let mut e: v7::Descr = zeroed();
    e.type_ = u64::from(abi::event::KERNEL_PHASE);
    e.u.kernel_phase = KernelPhase {
        channel_id: 5,
        phase_id: 1,
        phase_name: c"compute".as_ptr(),
        p_timer: 900,
    };
    let e = start(ctx, &mut e);
    state(e, abi::state::KERNEL_PHASE_STOP, 999);
    stop(e);
}

fn find(records: &[Record], call: CallId, arg2: u64) -> Option<&Record> {
    records.iter().find(|r| {
        r.kind() == Some(RecordKind::ProfStart) && r.call() == Some(call) && r.args[2] == arg2
    })
}

fn naming<'a>(records: &'a [Record], start: &Record) -> Vec<&'a Record> {
    let me = start.slot_ref().encode();
    records
        .iter()
        .filter(|r| r.kind() != Some(RecordKind::ProfStart) && r.args[0] == me)
        .collect()
}

#[test]
fn stops_land_in_place_or_in_their_own_record() {
    if v7driver::is_child() {
        child();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, dump) = v7driver::run_child(
        "stops_land_in_place_or_in_their_own_record",
        dir.path(),
        Some("all"),
        &[("NCCLSHIM_PROFILER_RING_SLOTS", RING_SLOTS.to_string())],
    );
    let d = read_dump(&dump).unwrap();
    assert_eq!(d.summary.torn, 0);
    let recs = &d.records;
    let done = Completion::of(&d);

    for r in recs
        .iter()
        .filter(|r| r.kind() == Some(RecordKind::ProfStart))
    {
        assert_ne!(r.flags & slot_flags::COMPLETES_IN_PLACE, 0, "{r:?}");
    }
    let a = find(recs, CallId::ProfColl, 1).expect("A");
    assert!(
        a.t_exit_ns.is_some_and(|t| t >= a.t_enter_ns),
        "A completed in place"
    );
    assert!(naming(recs, a).is_empty());
    assert!(done.stopped(a));

    let b = find(recs, CallId::ProfColl, 2).expect("B");
    assert_eq!(b.t_exit_ns, None, "B's start stays in flight");
    let b_stops = naming(recs, b);
    assert_eq!(b_stops.len(), 1);
    assert_eq!(b_stops[0].kind(), Some(RecordKind::ProfStop));
    assert_eq!(b_stops[0].call(), Some(CallId::ProfColl));
    assert_ne!(b_stops[0].ring, b.ring, "written by the stopping thread");
    assert!(done.stopped(b));

    let c = find(recs, CallId::ProfKernelCh, 3).expect("C");
    assert!(c.t_exit_ns.is_some());
    assert_eq!(
        (c.args[3], c.args[4]),
        (700, 777),
        "gpu start and stop in one record"
    );
    assert!(naming(recs, c).is_empty());
    assert_eq!(done.kernel_stop(c), Some(777));

    let k = find(recs, CallId::ProfKernelCh, 4).expect("D");
    assert!(
        k.t_exit_ns.is_some(),
        "D stopped on its own thread: in place"
    );
    assert_eq!(k.args[4], 0, "its GPU stop time came from another thread");
    let k_states = naming(recs, k);
    assert_eq!(k_states.len(), 1);
    assert_eq!(k_states[0].kind(), Some(RecordKind::ProfState));
    assert_eq!((k_states[0].args[1], k_states[0].args[2]), (22, 888));
    assert_eq!(done.kernel_stop(k), Some(888));

    let e = find(recs, CallId::ProfKernelPhase, 5).expect("E");
    assert!(e.t_exit_ns.is_some());
    assert_eq!((e.args[3], e.args[4], e.args[5]), (1, 900, 999));
    assert!(naming(recs, e).is_empty());
    assert_eq!(done.kernel_stop(e), Some(999));

    // F's start was overwritten before its stop: the stop is a record of its own, naming a
    // sequence number older than anything left in the ring.
    assert!(
        find(recs, CallId::ProfColl, 99).is_none(),
        "F's start was overwritten"
    );
    let oldest = recs
        .iter()
        .filter(|r| r.ring == a.ring)
        .map(|r| r.seq)
        .min()
        .unwrap();
    let f_stop = recs
        .iter()
        .find(|r| r.kind() == Some(RecordKind::ProfStop) && r.ring == a.ring)
        .expect("F's stop record");
    let named = ncclshim_dump::SlotRef::decode(f_stop.args[0]).unwrap();
    assert_eq!(named.ring, a.ring);
    assert!(named.seq < oldest);
    assert!(d.summary.lost > 0);
}
