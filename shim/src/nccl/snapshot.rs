//! Snapshots of what a diagnosis needs besides the calls: the filtered environment, the loaded
//! NCCL / CUDA / network libraries with versions, host facts and the process's command line.
//! Taken when the dump is created (the first NCCL event) and again, for environment and
//! libraries, at each communicator init (a framework may set `NCCL_*` or load a plugin late);
//! an unchanged snapshot is not stored twice.

use crate::nccl::hash::get_hash;
use ncclshim_dump::layout::flags;
use ncclshim_dump::schema::ArgView;
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, RingWriter};
use ncclshim_host_facts as facts;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a snapshot was taken (`args[0]` of the `snapshot` record).
#[repr(u64)]
#[derive(Clone, Copy)]
pub enum Reason {
    FirstEvent = 0,
    CommInit = 1,
    /// The first call through a handle lookup of a libnccl not seen before (`handles`).
    NewLibrary = 3,
}

static LAST_ENV: AtomicU64 = AtomicU64::new(0);
static LAST_LIBS: AtomicU64 = AtomicU64::new(0);

fn store(r: &Recorder, w: &RingWriter, kind: BlobKind, json: &[u8], reason: Reason) {
    let blob = r.append_blob(kind, json);
    let mut e = Entry::new(RecordKind::Snapshot, CallId::SnapshotTaken);
    e.blob = blob;
    e.args = ncclshim_dump::schema::args::SnapshotTaken {
        reason: reason as u64,
        blob_kind: kind as u64,
    }
    .to_args();
    w.instant(&e);
}

/// Stores `json` unless it equals the last one stored under `last` (always on a first event,
/// which in a forked child is a new file).
fn store_changed(
    r: &Recorder,
    w: &RingWriter,
    kind: BlobKind,
    json: &[u8],
    reason: Reason,
    last: &AtomicU64,
) {
    let h = get_hash(json);
    let prev = last.swap(h, Ordering::Relaxed);
    if matches!(reason, Reason::FirstEvent) || prev != h {
        store(r, w, kind, json, reason);
    }
}

/// Takes the snapshots. `full` adds host facts and process facts (once per dump).
pub fn take(r: &Recorder, w: &RingWriter, reason: Reason, full: bool) {
    if let Ok(j) = serde_json::to_vec(&facts::environment()) {
        store_changed(r, w, BlobKind::Environment, &j, reason, &LAST_ENV);
    }
    let libs = facts::collect_libraries(facts::VersionProbe::NoLoad);
    if libs.nccl_static {
        r.set_flag(flags::NCCL_STATIC);
    }
    if let Ok(j) = serde_json::to_vec(&libs) {
        store_changed(r, w, BlobKind::Libraries, &j, reason, &LAST_LIBS);
    }
    if full {
        if let Ok(j) = serde_json::to_vec(&facts::collect_host_facts()) {
            store(r, w, BlobKind::HostFacts, &j, reason);
        }
        if let Ok(j) = serde_json::to_vec(&facts::collect_process()) {
            store(r, w, BlobKind::Process, &j, reason);
        }
    }
}
