//! Writes a small synthetic dump (a few calls, an in-flight one, blobs) into the directory given
//! as the first argument: a seed for the fuzzer and something to try `ncclshim dump` on.
//!
//! Every part of the current format is present (a per-thread ring, the keep ring, a
//! communicator-table entry, blobs), each at its smallest size, so that the whole file stays
//! under the fuzzer's 64 KiB input cap (`-max_len=65536` in `.ci/run`) and mutations reach
//! every section: `format/fuzz/seeds/sample-format2.ncclshim` was written by this program.

use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::{BlobKind, CallId, CommEntryWriter, Entry, RecordKind, Recorder, WriterKind};

fn main() {
    let dir = std::env::args().nth(1).expect("usage: write_sample DIR");
    let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.into());
    c.rings = 2;
    c.slots_per_ring = 16;
    c.arena_bytes = 4096;
    c.keep_slots = 8;
    c.comm_entries = 2;
    let rec = Recorder::create(&c.normalized()).expect("create dump");
    let ring = rec.claim_ring();
    if let Some(comm) = rec.claim_comm_entry() {
        comm.publish(
            CallId::NcclCommInitRank,
            0x5000,
            0xc0de,
            0x1d,
            2,
            0,
            (0, -1, -1),
            true,
        );
        comm.issue(0, CallId::NcclAllReduce, 1024, 7, 0, -1, 0);
        comm.complete(0, 0);
    }
    let mut init = Entry::new(RecordKind::Call, CallId::NcclCommInitRank);
    init.comm = 0x5000;
    rec.keep_writer_or(&ring).begin(&init).complete(0);
    let env = rec.append_blob(BlobKind::Environment, br#"{"NCCL_NET":"IB"}"#);
    let mut snap = Entry::new(RecordKind::Snapshot, CallId::SnapshotTaken);
    snap.blob = env;
    ring.instant(&snap);
    for i in 0..5u64 {
        let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
        e.comm = 0x5000;
        e.args[0] = 1 << i;
        e.args[7] = i;
        ring.begin(&e).complete(0);
    }
    let failing = ring.begin(&Entry::new(RecordKind::Call, CallId::NcclCommInitRank));
    let text = rec.append_blob(BlobKind::ErrorText, b"Failed to initialize any NET plugin");
    failing.set_blob(text, ncclshim_dump::schema::slot_flags::HAS_ERROR_TEXT);
    failing.complete(5);
    drop(ring.begin(&Entry::new(RecordKind::Call, CallId::NcclGroupEnd)));
    println!("{}", rec.path().display());
}
