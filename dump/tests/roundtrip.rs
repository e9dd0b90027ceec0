//! Writer → reader round trips through a real file.

use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, WriterKind};
use ncclshim_format::reader::read_dump;

fn small_config(dir: &std::path::Path) -> RecorderConfig {
    let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.to_path_buf());
    c.rings = 4;
    c.slots_per_ring = 16;
    c.arena_bytes = 8192;
    c.normalized()
}

#[test]
fn a_call_round_trips_with_completion_and_blob() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::create(&small_config(dir.path())).unwrap();
    let ring = rec.claim_ring();
    let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
    e.comm = 0xc0;
    e.args[0] = 1024;
    let pending = ring.begin(&e);
    let blob = rec.append_blob(BlobKind::ErrorText, b"remote process exited");
    pending.set_blob(blob, 0);
    pending.complete(6);
    let open = ring.begin(&Entry::new(RecordKind::Call, CallId::NcclCommInitRank));
    drop(open);

    let dump = read_dump(rec.path()).unwrap();
    assert_eq!(dump.summary.records, 2);
    assert_eq!(dump.summary.in_flight, 1);
    assert_eq!(dump.summary.torn, 0);
    let r = &dump.records[0];
    assert_eq!(r.call(), Some(CallId::NcclAllReduce));
    assert_eq!(r.rc, 6);
    assert_eq!(r.arg("count"), Some(1024));
    assert_eq!(dump.blob(r.blob).unwrap().text(), "remote process exited");
    assert!(dump.records[1].in_flight());
    let meta = std::fs::metadata(rec.path()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
}

#[test]
fn wrapping_reports_lost_records_and_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::create(&small_config(dir.path())).unwrap();
    let ring = rec.claim_ring();
    for i in 0..40u64 {
        let mut e = Entry::new(RecordKind::Event, CallId::Test);
        e.args[0] = i;
        ring.instant(&e);
    }
    let dump = read_dump(rec.path()).unwrap();
    assert_eq!(dump.summary.records, 16);
    assert_eq!(dump.summary.lost, 24);
    let firsts: Vec<u64> = dump.records.iter().map(|r| r.args[0]).collect();
    assert_eq!(firsts, (24..40).collect::<Vec<_>>());
}

#[test]
fn record_times_read_back_as_monotonic_nanoseconds() {
    use ncclshim_dump::clock::monotonic_ns;
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::create(&small_config(dir.path())).unwrap();
    let ring = rec.claim_ring();
    let before = monotonic_ns();
    let p = ring.begin(&Entry::new(RecordKind::Call, CallId::NcclAllReduce));
    std::thread::sleep(std::time::Duration::from_millis(20));
    p.complete(0);
    let after = monotonic_ns();
    let dump = read_dump(rec.path()).unwrap();
    let r = &dump.records[0];
    let exit = r.t_exit_ns.unwrap();
    // Correctness of the time base conversion (TSC or not), with a generous margin for the
    // reads around the record: this bounds an error, it does not time anything.
    let slack = 1_000_000;
    assert!(
        r.t_enter_ns + slack >= before && r.t_enter_ns <= exit,
        "{r:?} before={before}"
    );
    assert!(exit <= after + slack, "{exit} after={after}");
    assert!(
        exit - r.t_enter_ns >= 19_000_000,
        "the 20 ms call lasted {} ns",
        exit - r.t_enter_ns
    );
    assert!(dump.header.clock_kind == "tsc" || dump.header.clock_kind == "monotonic");
}

#[test]
fn a_record_reopened_on_its_own_thread_completes_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::create(&small_config(dir.path())).unwrap();
    let ring = rec.claim_ring();
    let started = ring
        .begin(&Entry::new(RecordKind::ProfStart, CallId::ProfColl))
        .slot_ref();
    ring.instant(&Entry::new(RecordKind::Event, CallId::Test));
    assert!(
        rec.claim_ring().reopen(started).is_none(),
        "another thread's ring is not reopened"
    );
    let p = ring.reopen(started).expect("own record");
    p.set_arg(4, 77);
    p.complete(0);
    let dump = read_dump(rec.path()).unwrap();
    let r = dump
        .records
        .iter()
        .find(|r| r.slot_ref() == started)
        .unwrap();
    assert!(!r.in_flight());
    assert_eq!(r.args[4], 77);

    // Once the ring (16 slots) has wrapped over a record, it cannot be reopened.
    let old = ring
        .begin(&Entry::new(RecordKind::ProfStart, CallId::ProfColl))
        .slot_ref();
    for _ in 0..16 {
        ring.instant(&Entry::new(RecordKind::Event, CallId::Test));
    }
    assert!(ring.reopen(old).is_none());
}
