//! Writes a small synthetic dump (a few calls, an in-flight one, blobs) into the directory given
//! as the first argument: a seed for the fuzzer and something to try `ncclshim dump` on.

use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, WriterKind};

fn main() {
    let dir = std::env::args().nth(1).expect("usage: write_sample DIR");
    let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.into());
    c.rings = 2;
    c.slots_per_ring = 16;
    c.arena_bytes = 4096;
    let rec = Recorder::create(&c.normalized()).expect("create dump");
    let ring = rec.claim_ring();
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
