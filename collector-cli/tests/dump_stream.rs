//! `ncclshim dump` streams a dump (issue 22 item 6) and must print exactly what it printed when
//! it decoded the whole file first: the streamed lines are compared byte for byte with
//! `write_dump_lines` over `read_dump` on every committed fixture dump, the real-GPU captures,
//! and dumps written here with the real writer (a wrapped ring with keep-ring copies, then
//! damaged and truncated copies of it), through the library and through the binary.

mod support;

use collector_cli::dumpjson::{write_dump_lines, write_dump_stream};
use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::{Entry, Recorder};
use ncclshim_format::reader::{open_stream, read_dump};
use ncclshim_format::schema::slot_flags::KEEP_COPY;
use ncclshim_format::{CallId, RecordKind, WriterKind};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The lines as the old `ncclshim dump` made them: the whole dump decoded, then printed.
fn collected_lines(path: &Path) -> String {
    let d = read_dump(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    write_dump_lines(&d, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn streamed_lines(path: &Path) -> String {
    let s = open_stream(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    write_dump_stream(&s, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn assert_same_lines(path: &Path) {
    let (old, new) = (collected_lines(path), streamed_lines(path));
    if old != new {
        let first = old
            .lines()
            .zip(new.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(old.lines().count().min(new.lines().count()));
        panic!(
            "{}: streamed output differs at line {first}:\n old: {:?}\n new: {:?}",
            path.display(),
            old.lines().nth(first),
            new.lines().nth(first)
        );
    }
}

#[test]
fn committed_fixture_dumps_stream_to_the_same_lines() {
    let mut dumps = 0;
    for dir in support::captures::fixture_dirs() {
        for path in ncclshim_diagnose::load::find_dumps(&dir).unwrap() {
            assert_same_lines(&path);
            dumps += 1;
        }
    }
    assert!(dumps > 20, "only {dumps} fixture dumps found");
}

#[test]
fn real_gpu_capture_dumps_stream_to_the_same_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real-gpu");
    let mut archives: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .flat_map(|capture| std::fs::read_dir(capture.path()).into_iter().flatten())
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .collect();
    archives.sort();
    assert!(archives.len() > 10, "{archives:?}");
    let mut dumps = 0;
    for archive in archives {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::open(&archive).unwrap();
        tar::Archive::new(flate2::read::GzDecoder::new(file))
            .unpack(dir.path())
            .unwrap_or_else(|e| panic!("{}: {e}", archive.display()));
        for path in walk(dir.path()) {
            if read_dump(&path).is_ok() {
                assert_same_lines(&path);
                dumps += 1;
            }
        }
    }
    assert!(dumps > 10, "only {dumps} capture dumps found");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

const SLOTS: u32 = 64;
const CALLS: u64 = 150;

/// A finished dump whose thread ring wrapped twice over: every 10th call failed and was copied
/// into the keep ring (as the shim does), so the early copies outlive their originals and the
/// late ones are dropped as duplicates; some calls point to a blob.
fn wrapped_dump(dir: &Path) -> PathBuf {
    let mut c = RecorderConfig::defaults(WriterKind::Shim, dir.to_path_buf());
    c.rings = 2;
    c.slots_per_ring = SLOTS;
    c.arena_bytes = 1 << 16;
    let rec = Recorder::create(&c.normalized()).unwrap();
    let ring = rec.claim_ring();
    let keep = rec.keep_writer(ring.tid()).expect("a keep ring");
    rec.append_blob(
        ncclshim_format::BlobKind::Environment,
        b"{\"unreferenced\":1}",
    );
    for i in 0..CALLS {
        let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
        e.args[0] = i;
        let p = ring.begin(&e);
        let failed = i % 10 == 3;
        if i % 25 == 7 {
            let blob = rec.append_blob(ncclshim_format::BlobKind::ErrorText, b"text of call");
            p.set_blob(blob, 0);
        }
        if failed {
            let mut copy = p.entry().expect("its entry");
            copy.flags |= KEEP_COPY;
            keep.begin_at(&copy, p.t_enter()).complete(2);
        }
        p.complete(if failed { 2 } else { 0 });
    }
    // One call still in flight when the file is read: begun, never completed.
    let _in_flight = ring.begin(&Entry::new(RecordKind::Call, CallId::NcclBroadcast));
    rec.mark_clean_exit();
    rec.path().to_path_buf()
}

#[test]
fn a_wrapped_ring_with_keep_copies_streams_to_the_same_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = wrapped_dump(dir.path());
    let d = read_dump(&path).unwrap();
    // What makes the comparison worth something: the ring wrapped, copies were both kept and
    // dropped, a blob is referenced and one is not.
    assert!(d.summary.lost > 0, "{:?}", d.summary);
    let kept = d
        .records
        .iter()
        .filter(|r| r.flags & KEEP_COPY != 0)
        .count() as u64;
    let failed = CALLS.div_ceil(10);
    assert!(kept > 0 && kept < failed, "{kept} of {failed} copies kept");
    assert!(d.records.iter().any(|r| r.blob != 0));
    assert!(d.summary.in_flight > 0);
    assert_same_lines(&path);
    // The binary prints the streamed lines.
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("dump")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        collected_lines(&path)
    );
}

/// The file offset of the slot holding the record `seq` of the first thread ring.
fn slot_offset(bytes: &[u8], path: &Path, seq: u64) -> usize {
    let d = read_dump(path).unwrap();
    let r = d
        .records
        .iter()
        .find(|r| r.seq == seq && r.flags & KEEP_COPY == 0 && r.ring == 0)
        .unwrap_or_else(|| panic!("no record {seq}"));
    let commit = (seq << 1) | 1;
    (0..bytes.len() / 128)
        .map(|i| i * 128)
        .find(|&o| {
            u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) == commit
                && u32::from_le_bytes(bytes[o + 36..o + 40].try_into().unwrap()) == r.tid
                && u16::from_le_bytes(bytes[o + 26..o + 28].try_into().unwrap()) == r.call_raw
        })
        .expect("the slot")
}

#[test]
fn damaged_and_truncated_rings_stream_to_the_same_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = wrapped_dump(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let newest = CALLS; // seq of the last completed call (the in-flight one is CALLS + 1)
    let set_commit = |bytes: &mut Vec<u8>, at: usize, commit: u64| {
        bytes[at..at + 8].copy_from_slice(&commit.to_le_bytes());
    };
    // A slot left from a lap ago among newer ones: the ring reads out of order and the slot
    // is dropped as overwritten.
    let a = slot_offset(&bytes, &path, newest - 5);
    set_commit(&mut bytes, a, ((newest - 5 - u64::from(SLOTS)) << 1) | 1);
    // A torn slot (even commit word) and one whose number cannot be its slot's.
    let b = slot_offset(&bytes, &path, newest - 20);
    set_commit(&mut bytes, b, (newest - 20) << 1);
    let c = slot_offset(&bytes, &path, newest - 30);
    set_commit(&mut bytes, c, ((newest - 29) << 1) | 1);
    let damaged = dir.path().join("damaged.ncclshim");
    std::fs::write(&damaged, &bytes).unwrap();
    let d = read_dump(&damaged).unwrap();
    assert!(d.summary.torn > 0, "{:?}", d.summary);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.message.contains("does not belong")),
        "{:?}",
        d.warnings
    );
    assert_same_lines(&damaged);
    // Cut anywhere: in the rings, in the blobs, in the header's extension.
    let len = bytes.len();
    let mut cuts: Vec<usize> = (1..16).map(|i| len * i / 16).collect();
    cuts.extend([a + 64, b, c + 128, 4096, 8192]);
    for cut in cuts {
        let short = dir.path().join(format!("cut-{cut}.ncclshim"));
        std::fs::write(&short, &bytes[..cut.min(len)]).unwrap();
        if read_dump(&short).is_ok() {
            assert_same_lines(&short);
        } else {
            assert!(open_stream(&short).is_err(), "{cut}");
        }
    }
}
