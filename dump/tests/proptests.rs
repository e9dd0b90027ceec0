//! Property tests: whatever is written reads back identically, and no byte pattern makes the
//! reader panic.

use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, WriterKind};
use ncclshim_format::reader::{decode_bytes, read_dump};
use proptest::prelude::*;
use std::path::Path;

fn config(dir: &Path, slots: u32) -> RecorderConfig {
    let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.to_path_buf());
    c.rings = 2;
    c.slots_per_ring = slots;
    c.arena_bytes = 16384;
    c.normalized()
}

#[derive(Debug, Clone)]
struct Spec {
    call: CallId,
    kind: RecordKind,
    comm: u64,
    rc: i32,
    flags: u32,
    args: [u64; SLOT_ARGS],
    blob: Option<Vec<u8>>,
    complete: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::sample::select(CallId::ALL.to_vec()),
        prop::sample::select(vec![
            RecordKind::Call,
            RecordKind::Event,
            RecordKind::ProfStart,
        ]),
        any::<u64>(),
        any::<i32>(),
        any::<u32>(),
        any::<[u64; SLOT_ARGS]>(),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..300)),
        any::<bool>(),
    )
        .prop_map(|(call, kind, comm, rc, flags, args, blob, complete)| Spec {
            call,
            kind,
            comm,
            rc,
            flags,
            args,
            blob,
            complete,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn records_round_trip(specs in prop::collection::vec(spec(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::create(&config(dir.path(), 64)).unwrap();
        let ring = rec.claim_ring();
        let mut expected_blobs = Vec::new();
        for s in &specs {
            let mut e = Entry::new(s.kind, s.call);
            e.comm = s.comm;
            e.flags = s.flags;
            e.args = s.args;
            let blob = s.blob.as_ref().map(|b| rec.append_blob(BlobKind::Text, b)).unwrap_or(0);
            expected_blobs.push(blob);
            let p = ring.begin(&e);
            p.set_blob(blob, 0);
            if s.complete { p.complete(s.rc) } else { drop(p) }
        }
        let dump = read_dump(rec.path()).unwrap();
        prop_assert_eq!(dump.records.len(), specs.len());
        prop_assert_eq!(dump.summary.torn, 0);
        prop_assert_eq!(dump.summary.in_flight as usize,
            specs.iter().filter(|s| !s.complete && s.kind == RecordKind::Call).count());
        for ((r, s), blob) in dump.records.iter().zip(&specs).zip(&expected_blobs) {
            prop_assert_eq!(r.call(), Some(s.call));
            prop_assert_eq!(r.kind(), Some(s.kind));
            prop_assert_eq!(r.comm, s.comm);
            prop_assert_eq!(r.flags, s.flags);
            prop_assert_eq!(r.args, s.args);
            prop_assert_eq!(r.in_flight(), !s.complete);
            if s.complete { prop_assert_eq!(r.rc, s.rc); }
            prop_assert_eq!(r.blob, *blob);
            if let Some(bytes) = &s.blob {
                prop_assert_eq!(&dump.blob(*blob).unwrap().bytes, bytes);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..20000)) {
        let _ = decode_bytes(&bytes, Path::new("random"));
    }

    #[test]
    fn mutated_dumps_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..64),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = valid_dump_bytes();
        for (i, v) in flips {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        if truncate {
            let at = cut.index(bytes.len());
            bytes.truncate(at);
        }
        if let Ok(d) = decode_bytes(&bytes, Path::new("mutated")) {
            // Whatever is returned must be internally consistent.
            prop_assert_eq!(d.summary.records as usize, d.records.len());
            prop_assert!(d.records.iter().all(|r| r.seq > 0));
        }
    }
}

/// A small valid dump with records, an in-flight call and blobs, to mutate.
fn valid_dump_bytes() -> Vec<u8> {
    use std::sync::OnceLock;
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let rec = Recorder::create(&config(dir.path(), 16)).unwrap();
            let ring = rec.claim_ring();
            for i in 0..20u64 {
                let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
                e.args[0] = i;
                let p = ring.begin(&e);
                p.set_blob(rec.append_blob(BlobKind::ErrorText, b"some error text"), 0);
                p.complete(0);
            }
            let _in_flight = ring.begin(&Entry::new(RecordKind::Call, CallId::NcclCommInitRank));
            drop(_in_flight);
            std::fs::read(rec.path()).unwrap()
        })
        .clone()
}
