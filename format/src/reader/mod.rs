//! The defensive reader: decodes a dump into typed records without trusting a single byte.
//!
//! Every offset and length is checked against the real file size before it is used, so
//! allocations are bounded by the file itself; problems that leave the rest readable (a torn
//! slot, a truncated tail, a bad blob) become warnings, and only an unusable header is an error.
//! A file that is still being written is read with a seqlock check: slots whose commit word
//! changed while they were copied are counted as torn instead of returned half-updated.
//!
//! The files below this face, bottom up: `bytes` (field reads), `model` (what the reader gives), `source` (where the
//! bytes come from), `header`, `tables` (communicators, blobs), `rings` (records), `stream` (the
//! streaming reader). This file only puts them together.

mod bytes;
mod header;
mod model;
mod rings;
mod source;
mod stream;
mod tables;

pub use model::*;
pub use source::Source;
pub use stream::{open_stream, DumpStream};

use header::decode_header;
use rings::read_rings;
use source::open_dump_file;
use std::path::Path;
use tables::{read_blobs, read_comm_table};

/// Reads a dump file from disk.
pub fn read_dump(path: &Path) -> Result<Dump, DumpError> {
    let file = open_dump_file(path)?;
    decode(&file, path)
}

/// Decodes a dump from bytes in memory (`path` is only used in messages).
pub fn decode_bytes(bytes: &[u8], path: &Path) -> Result<Dump, DumpError> {
    decode(bytes, path)
}

/// Decodes any `Source`.
pub fn decode<S: Source + ?Sized>(src: &S, path: &Path) -> Result<Dump, DumpError> {
    let (mut dump, g) = decode_header(src, path)?;
    read_rings(src, &g, &mut dump);
    read_blobs(src, &g, &mut dump);
    read_comm_table(src, &g, &mut dump);
    Ok(dump)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SLOT_ARGS;
    use crate::schema::{args, ArgView, CallId, RecordKind, PROF_STATE_GPU_DONE};

    fn record(kind: RecordKind, call: CallId, args: [u64; SLOT_ARGS]) -> Record {
        Record {
            ring: 0,
            seq: 1,
            tid: 1,
            kind_raw: kind as u16,
            call_raw: call as u16,
            t_enter_ns: 10,
            t_exit_ns: Some(20),
            rc: 0,
            flags: 0,
            comm: 0,
            blob: 0,
            args,
        }
    }

    #[test]
    fn a_record_reads_only_through_its_own_view() {
        let words = [5, 7, 1, u64::MAX, 0xa0, 0xb0, 0x10, 42, 42];
        let r = record(RecordKind::Call, CallId::NcclBroadcast, words);
        let c = r
            .view::<args::Collective>()
            .expect("a broadcast is a collective");
        assert_eq!((c.count, c.datatype, c.root, c.seq), (5, 7, u64::MAX, 42));
        assert_eq!(r.view::<args::PointToPoint>(), None);
        assert_eq!(r.view::<args::CommInitRank>(), None);
        let send = record(RecordKind::Call, CallId::NcclSend, words);
        assert_eq!(send.view::<args::PointToPoint>().unwrap().peer, u64::MAX);

        // Stop and state records are read by their own layout, whatever event they name.
        let stop = record(
            RecordKind::ProfStop,
            CallId::ProfColl,
            [9, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        assert_eq!(stop.view::<args::ProfStop>().unwrap().handle, 9);
        assert_eq!(stop.view::<args::ProfColl>(), None);
        let done = args::ProfGpuDone {
            handle: 9,
            state: PROF_STATE_GPU_DONE,
            gpu_start: 100,
            gpu_stop: 250,
            channels: 2,
        };
        let state = record(RecordKind::ProfState, CallId::ProfColl, done.to_args());
        let g = state.gpu_done().expect("a GPU-done state");
        assert_eq!(
            (g.op, g.gpu_start, g.gpu_stop, g.channels),
            (9, 100, 250, 2)
        );
    }
}
