//! The records: the thread rings (fixed in format 1, extents of the growing tail in format 2)
//! and the keep ring, read slot by slot under the seqlock check, and the keep ring's copies
//! dropped where their originals are still there.

use super::bytes::*;
use super::header::Geo;
use super::model::*;
use super::source::*;
use crate::layout::*;
use crate::schema::RecordKind;
use crate::timebase::TimeCursor;

pub(super) fn read_rings<S: Source + ?Sized>(src: &S, g: &Geo, dump: &mut Dump) {
    let ring_count = dump.header.ring_count;
    let cap = u64::from(dump.header.slots_per_ring);
    let live = dump.header.writer_alive;
    let dir_len = (u64::from(ring_count) + 1) * RING_DIR_ENTRY_SIZE as u64;
    if g.ring_dir_offset + dir_len > g.len {
        dump.warnings.push(Warning {
            offset: g.ring_dir_offset,
            message: "ring directory cut off by truncation; no records readable".into(),
        });
        return;
    }
    let mut dir = vec![0u8; dir_len as usize];
    if let Err(e) = src.read_at(g.ring_dir_offset, &mut dir) {
        dump.warnings.push(Warning {
            offset: g.ring_dir_offset,
            message: format!("ring directory unreadable: {e}"),
        });
        return;
    }
    for ring in 0..=ring_count {
        let e = &dir[ring as usize * RING_DIR_ENTRY_SIZE..][..RING_DIR_ENTRY_SIZE];
        if g.grows {
            read_grown_ring(src, g, dump, ring, e);
            continue;
        }
        let ring_offset = g.rings_offset + u64::from(ring) * cap * SLOT_SIZE as u64;
        read_ring(
            src,
            g,
            dump,
            ring,
            e,
            ring_offset,
            cap,
            ring == ring_count,
            live,
        );
    }
    if g.keep_slots > 0 && g.keep_dir.len() == RING_DIR_ENTRY_SIZE {
        let e = g.keep_dir.clone();
        let keep = ring_count + 1;
        read_ring(
            src,
            g,
            dump,
            keep,
            &e,
            g.keep_offset,
            u64::from(g.keep_slots),
            true,
            live,
        );
        drop_kept_copies(dump);
    }
}

/// Format 2: a ring's slots are where its directory entry says (the overflow ring's at
/// `rings_offset`); a ring whose allocation failed or is under way has none.
pub(super) fn read_grown_ring<S: Source + ?Sized>(
    src: &S,
    g: &Geo,
    dump: &mut Dump,
    ring: u32,
    e: &[u8],
) {
    let overflow = ring == dump.header.ring_count;
    if overflow {
        let cap = u64::from(g.overflow_slots);
        read_ring(
            src,
            g,
            dump,
            ring,
            e,
            g.rings_offset,
            cap,
            true,
            dump.header.writer_alive,
        );
        return;
    }
    if u32_at(e, 4) != ring_state::CLAIMED {
        return;
    }
    let (offset, slots) = (u64_at(e, 40), u32_at(e, 48));
    let fits = offset >= g.arena_offset
        && offset.is_multiple_of(4096)
        && slots == dump.header.slots_per_ring
        && offset
            .checked_add(u64::from(slots) * SLOT_SIZE as u64)
            .is_some_and(|end| end <= g.tail_end.max(g.arena_offset));
    if !fits {
        dump.warnings.push(Warning {
            offset: g.ring_dir_offset + u64::from(ring) * RING_DIR_ENTRY_SIZE as u64,
            message: format!(
                "ring {ring}: slots at offset {offset} ({slots} slots) lie outside the file's tail"
            ),
        });
        return;
    }
    let live = dump.header.writer_alive;
    read_ring(src, g, dump, ring, e, offset, u64::from(slots), false, live);
}

/// A keep-ring copy of a failed call (`KEEP_COPY`) stands in for its original only once the
/// thread's ring overwrote the original: while both are there, readers see the original alone.
pub(super) fn drop_kept_copies(dump: &mut Dump) {
    use crate::schema::slot_flags::KEEP_COPY;
    if !dump.records.iter().any(|r| r.flags & KEEP_COPY != 0) {
        return;
    }
    let key = |r: &Record| (r.tid, r.t_enter_ns, r.call_raw);
    // The copies are few (the keep ring is small) and the originals are every record of the
    // dump: look each original up among the sorted copies instead of hashing them all.
    let mut copies: Vec<(u32, u64, u16)> = dump
        .records
        .iter()
        .filter(|r| r.flags & KEEP_COPY != 0)
        .map(key)
        .collect();
    copies.sort_unstable();
    let mut copied: Vec<(u32, u64, u16)> = dump
        .records
        .iter()
        .filter(|r| r.flags & KEEP_COPY == 0 && copies.binary_search(&key(r)).is_ok())
        .map(key)
        .collect();
    copied.sort_unstable();
    let before = dump.records.len();
    dump.records
        .retain(|r| r.flags & KEEP_COPY == 0 || copied.binary_search(&key(r)).is_err());
    let dropped = (before - dump.records.len()) as u64;
    dump.summary.records = dump.summary.records.saturating_sub(dropped);
}

/// A scratch buffer larger than this (a ring of unusual size) is freed after use, not kept.
pub(super) const SCRATCH_KEPT_MAX: usize = 16 << 20;

thread_local! {
    /// One ring's slot bytes while they are decoded (see `read_ring`).
    static RING_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads one ring whose directory entry is `e` and whose slots start at `ring_offset`.
#[allow(clippy::too_many_arguments)] // one ring's coordinates, all needed
pub(super) fn read_ring<S: Source + ?Sized>(
    src: &S,
    g: &Geo,
    dump: &mut Dump,
    ring: u32,
    e: &[u8],
    ring_offset: u64,
    cap: u64,
    shared: bool,
    live: bool,
) {
    {
        let (state, head) = (u32_at(e, 4), u64_at(e, 8));
        if state == 0 && head == 0 {
            return;
        }
        // A slot one past the published head may hold a committed record whose head store was
        // cut off, or a torn one: read it too. The overflow ring's head is a reservation count.
        let mut used = head.saturating_add(1).min(cap);
        let present = g.len.saturating_sub(ring_offset) / SLOT_SIZE as u64;
        if present < used {
            dump.warnings.push(Warning {
                offset: ring_offset + present * SLOT_SIZE as u64,
                message: format!(
                    "ring {ring} cut off by truncation after {present} of {used} slots"
                ),
            });
            used = present;
        }
        // The slots are copied into this thread's scratch buffer, reused from ring to ring and
        // dump to dump: a fresh zeroed buffer per ring cost page faults on every dump.
        // It only ever grows: zeroing it again for each ring (a small ring, then a large one)
        // cost a memset of the whole ring per dump.
        let mut scratch = RING_SCRATCH.with_borrow_mut(std::mem::take);
        let ring_bytes = used as usize * SLOT_SIZE;
        if scratch.len() < ring_bytes {
            scratch.resize(ring_bytes, 0);
        }
        let buf = &mut scratch[..ring_bytes];
        if let Err(err) = src.read_at(ring_offset, buf) {
            dump.warnings.push(Warning {
                offset: ring_offset,
                message: format!("ring {ring} unreadable: {err}"),
            });
            RING_SCRATCH.set(scratch);
            return;
        }
        let recheck = if live {
            let mut again = vec![0u8; buf.len()];
            src.read_at(ring_offset, &mut again).ok().map(|_| again)
        } else {
            None
        };
        let mut info = RingInfo::from_dir_entry(ring, e, shared);
        // The ring's records go straight to the end of the dump's list (one copy of each slot's
        // fields instead of two: this loop runs for every slot of every dump of a job).
        let first = dump.records.len();
        let used = used as usize;
        dump.records.reserve(used);
        // In slot order a wrapped ring is two runs of rising numbers (the newest lap, then the
        // rest of the previous one). Reading from the slot with the lowest number reads them in
        // order, so they need no sort (sorting moved every 128-byte record around).
        // Whole slots as arrays: every field below is at a fixed offset inside one, so the
        // decoding carries no bounds checks (per slot of every dump of a job, they were most of
        // its instructions).
        let (slots, _) = buf.as_chunks::<SLOT_SIZE>();
        let mut clock = g.time_base.cursor();
        let start = slots
            .iter()
            .enumerate()
            .filter_map(|(idx, s)| {
                let commit = slot_u64(s, 0);
                (commit & 1 == 1).then_some((commit >> 1, idx))
            })
            .min()
            .map_or(0, |(_, idx)| idx);
        for idx in (start..used).chain(0..start) {
            let s = &slots[idx];
            let commit = slot_u64(s, 0);
            if commit == 0 {
                continue;
            }
            let changed = recheck
                .as_ref()
                .is_some_and(|a| u64_at(a, idx * SLOT_SIZE) != commit);
            let seq = commit >> 1;
            if commit & 1 == 0 || changed {
                info.torn += 1;
                continue;
            }
            if seq == 0 || (seq - 1) % cap != idx as u64 || seq > head.saturating_add(1) {
                dump.warnings.push(Warning {
                    offset: ring_offset + (idx * SLOT_SIZE) as u64,
                    message: format!(
                        "ring {ring} slot {idx}: commit word {commit:#x} does not belong here"
                    ),
                });
                continue;
            }
            dump.records
                .push(record_from_slot(&mut clock, ring, seq, s));
        }
        if scratch.capacity() <= SCRATCH_KEPT_MAX {
            RING_SCRATCH.set(scratch);
        }
        let max_seq = dump.records[first..]
            .iter()
            .map(|r| r.seq)
            .max()
            .unwrap_or(0);
        // Only a damaged ring (a slot left from an older lap among newer ones) is out of order.
        let ring_records = &mut dump.records[first..];
        if !ring_records.is_sorted_by_key(|r| r.seq) {
            ring_records.sort_by_key(|r| r.seq);
        }
        // Slots older than one lap were overwritten by a newer lap: they sort first.
        let stale = dump.records[first..].partition_point(|r| r.seq.saturating_add(cap) <= max_seq);
        dump.records.drain(first..first + stale);
        let kept = &dump.records[first..];
        info.lost = max_seq.saturating_sub(cap);
        info.records = kept.len() as u64;
        // A corrupt head can claim up to 2^64 lost records per ring, so the totals saturate
        // instead of overflowing (found by the `decode` fuzz target).
        let in_flight = kept
            .iter()
            .filter(|r| r.in_flight() && r.kind() == Some(RecordKind::Call))
            .count() as u64;
        dump.summary.records = dump.summary.records.saturating_add(info.records);
        dump.summary.torn = dump.summary.torn.saturating_add(info.torn);
        dump.summary.lost = dump.summary.lost.saturating_add(info.lost);
        dump.summary.in_flight = dump.summary.in_flight.saturating_add(in_flight);
        dump.rings.push(info);
    }
}

/// One committed slot's fields as a record (`seq` from its commit word, checked by the caller).
/// Always inlined: a call returned the 160-byte record through a `memcpy` per slot.
#[inline(always)]
pub(super) fn record_from_slot(
    clock: &mut TimeCursor,
    ring: u32,
    seq: u64,
    s: &[u8; SLOT_SIZE],
) -> Record {
    // Every field is at a fixed offset inside the slot array: no bounds checks (this runs for
    // every slot of every dump of a job).
    let t_exit = slot_u64(s, 16);
    Record {
        ring,
        seq,
        tid: slot_u32(s, 36),
        kind_raw: u16::from_le_bytes([s[24], s[25]]),
        call_raw: u16::from_le_bytes([s[26], s[27]]),
        t_enter_ns: clock.to_monotonic_ns(slot_u64(s, 8)),
        t_exit_ns: (t_exit != IN_FLIGHT).then(|| clock.to_monotonic_ns(t_exit)),
        rc: slot_u32(s, 28) as i32,
        flags: slot_u32(s, 32),
        comm: slot_u64(s, 40),
        blob: slot_u64(s, 48),
        args: std::array::from_fn(|i| slot_u64(s, 56 + 8 * i)),
    }
}
