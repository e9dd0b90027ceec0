//! The communicator table and the blob arena (with format 2's growing tail of extents).

use super::bytes::*;
use super::header::Geo;
use super::model::*;
use super::source::*;
use crate::layout::*;
use crate::schema::{BlobKind, CallId};

/// Reads the communicator table's claimed entries (format minor >= 1).
pub(super) fn read_comm_table<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    if g.comm_entries == 0 {
        return;
    }
    let bytes = u64::from(g.comm_entries) * COMM_ENTRY_SIZE as u64;
    if g.comm_offset.saturating_add(bytes) > g.len {
        dump.warnings.push(Warning {
            offset: g.comm_offset,
            message: "communicator table cut off by truncation".into(),
        });
        return;
    }
    let mut buf = vec![0u8; bytes as usize];
    if let Err(e) = src.read_at(g.comm_offset, &mut buf) {
        dump.warnings.push(Warning {
            offset: g.comm_offset,
            message: format!("communicator table unreadable: {e}"),
        });
        return;
    }
    let tb = &g.time_base;
    let t = |v: u64| (v != 0).then(|| tb.to_monotonic_ns(v));
    for (i, e) in buf.chunks_exact(COMM_ENTRY_SIZE).enumerate() {
        let state = u32_at(e, 0);
        if state == comm_state::FREE || state > comm_state::ABORTED {
            continue;
        }
        let dtype_op = u32_at(e, 112);
        let small = |v: u32| (v & 0xff != 0xff).then_some((v & 0xff) as u8);
        dump.comms.push(CommInfo {
            index: i as u32,
            state,
            created_by: CallId::from_u16(u32_at(e, 4) as u16),
            comm: u64_at(e, 8),
            comm_hash: u64_at(e, 16),
            uid_hash: u64_at(e, 24),
            nranks: i32_at(e, 32),
            rank: i32_at(e, 36),
            cuda_dev: i32_at(e, 40),
            nccl_version: i32_at(e, 44),
            parent_hash: u64_at(e, 48),
            split_color: i32_at(e, 56),
            split_key: i32_at(e, 60),
            created_ns: t(u64_at(e, 64)).unwrap_or(0),
            ended_ns: t(u64_at(e, 72)),
            issued: u64_at(e, 80),
            completed: u64_at(e, 88),
            last_call: CallId::from_u16(u32_at(e, 96) as u16).filter(|_| u32_at(e, 96) != 0),
            last_rc: i32_at(e, 100),
            last_count: u64_at(e, 104),
            last_datatype: small(dtype_op),
            last_redop: small(dtype_op >> 8),
            last_peer: i32_at(e, 116),
            last_issued_ns: t(u64_at(e, 120)),
        });
    }
}

pub(super) fn read_blobs<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    if g.grows {
        read_tail(src, g, dump);
        return;
    }
    let mut used = dump.header.arena_used;
    let present = g.len.saturating_sub(g.arena_offset);
    if present < used {
        dump.warnings.push(Warning {
            offset: g.arena_offset + present,
            message: format!("blob arena cut off by truncation after {present} of {used} bytes"),
        });
        used = present;
    }
    if used == 0 {
        return;
    }
    let mut arena = vec![0u8; used as usize];
    if let Err(e) = src.read_at(g.arena_offset, &mut arena) {
        dump.warnings.push(Warning {
            offset: g.arena_offset,
            message: format!("blob arena unreadable: {e}"),
        });
        return;
    }
    let mut at = 0usize;
    while at + BLOB_HEADER_SIZE <= arena.len() {
        let len = u32_at(&arena, at) as usize;
        let kind = u16_at(&arena, at + 4);
        let commit = u32_at(&arena, at + 8);
        let file_offset = g.arena_offset + at as u64;
        if len == 0 && commit == 0 {
            // Reserved but never written (the writer died between reserving and writing):
            // the size is unknown, so nothing after it can be walked to.
            dump.warnings.push(Warning {
                offset: file_offset,
                message: "blob arena ends in an unwritten blob; later blobs unreachable".into(),
            });
            break;
        }
        let end = at + BLOB_HEADER_SIZE + len;
        if end > arena.len() || len as u64 > g.arena_size {
            dump.warnings.push(Warning {
                offset: file_offset,
                message: format!("blob length {len} runs past the arena"),
            });
            break;
        }
        if commit == BLOB_COMMITTED {
            dump.blobs.insert(
                file_offset,
                Blob {
                    offset: file_offset,
                    kind_raw: kind,
                    bytes: arena[at + BLOB_HEADER_SIZE..end].to_vec(),
                },
            );
        }
        at = (end + 7) & !7;
    }
}

/// Format 2: walks the tail's extents (blobs, ring slots, padding), keeping the blobs. An
/// extent that is not written (an allocation under way, or cut off by a crash or a full disk)
/// stops the walk; blobs that records point to past it are then read one by one.
pub(super) fn read_tail<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    let end = g.tail_end.min(g.len);
    let mut at = g.arena_offset;
    let mut stopped = None;
    while at + BLOB_HEADER_SIZE as u64 <= end {
        match read_extent(src, g, at, end) {
            Extent::Blob(b) => {
                at = (at + BLOB_HEADER_SIZE as u64 + b.bytes.len() as u64 + 7) & !7;
                dump.blobs.insert(b.offset, b);
            }
            Extent::Skip(next) => at = next,
            Extent::Bad(why) => {
                stopped = Some((at, why));
                break;
            }
        }
    }
    if let Some((offset, why)) = stopped {
        let wanted: Vec<u64> = dump
            .records
            .iter()
            .map(|r| r.blob)
            .filter(|&b| b > offset && !dump.blobs.contains_key(&b))
            .collect();
        for b in wanted {
            if let Extent::Blob(blob) = read_extent(src, g, b, end) {
                dump.blobs.insert(b, blob);
            }
        }
        if !dump.header.writer_alive {
            dump.warnings.push(Warning {
                offset,
                message: format!(
                    "file tail: {why}; blobs after it are read only where a record points to them"
                ),
            });
        }
    }
}

pub(super) enum Extent {
    Blob(Blob),
    /// Not a blob (ring slots, padding, an uncommitted blob): the offset of the next extent.
    Skip(u64),
    Bad(String),
}

pub(super) fn read_extent<S: Source + ?Sized>(src: &S, g: &Geo, at: u64, end: u64) -> Extent {
    let mut hdr = [0u8; BLOB_HEADER_SIZE];
    // `at` may come from a record's blob field: any u64, so the sum is checked.
    let header_end = at.checked_add(BLOB_HEADER_SIZE as u64);
    if at < g.arena_offset || !at.is_multiple_of(8) || header_end.is_none_or(|e| e > end) {
        return Extent::Bad(format!("extent offset {at} outside the tail"));
    }
    if let Err(e) = src.read_at(at, &mut hdr) {
        return Extent::Bad(format!("unreadable: {e}"));
    }
    let (len, kind, commit) = (u32_at(&hdr, 0), u16_at(&hdr, 4), u32_at(&hdr, 8));
    if len == 0 && commit == 0 {
        return Extent::Bad("an extent is not written (allocation under way, or cut off)".into());
    }
    let payload = at + BLOB_HEADER_SIZE as u64;
    let next = (payload + u64::from(len) + 7) & !7;
    if payload + u64::from(len) > end {
        return Extent::Bad(format!("extent length {len} runs past the end of the file"));
    }
    let kind_v = BlobKind::from_u16(kind);
    if commit != BLOB_COMMITTED || matches!(kind_v, Some(BlobKind::RingSlots | BlobKind::Pad)) {
        return Extent::Skip(next);
    }
    let mut bytes = vec![0u8; len as usize];
    if let Err(e) = src.read_at(payload, &mut bytes) {
        return Extent::Bad(format!("unreadable: {e}"));
    }
    Extent::Blob(Blob {
        offset: at,
        kind_raw: kind,
        bytes,
    })
}
