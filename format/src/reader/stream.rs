//! The streaming reader: a dump's records visited ring by ring, slot by slot, never collected,
//! so printing a dump of a million records (`ncclshim dump`) takes memory bounded by a chunk of
//! slots, not by the record count.
//!
//! It gives what `decode` gives, in the same order: the same rings, records (rings in index
//! order, each in sequence order, the keep ring last without the copies whose originals are still
//! there), blobs, warnings and summary. To know the ring lines and the summary before the first
//! record, the rings are read twice: a first pass counts (ring by ring, with the same seqlock and
//! placement checks as `read_ring`, in chunks of `CHUNK_SLOTS`), then `for_each_record` reads
//! them again and hands each record over. A third pass over the records runs only in a dump that
//! holds keep-ring copies, to find the originals that are still there.

use super::bytes::*;
use super::header::{decode_header, Geo};
use super::model::*;
use super::rings::record_from_slot;
use super::source::*;
use super::tables::{read_blobs, read_comm_table};
use crate::layout::*;
use crate::schema::slot_flags::KEEP_COPY;
use crate::schema::RecordKind;
use std::collections::BTreeSet;
use std::io;
use std::ops::Range;
use std::path::Path;

/// Slots read at once: 512 KiB, small against any ring worth streaming, large enough that a
/// ring costs few reads.
const CHUNK_SLOTS: usize = 4096;

/// What the keep-copy dedupe compares (`drop_kept_copies`): thread, entry time and call.
type CopyKey = (u32, u64, u16);

fn copy_key(r: &Record) -> CopyKey {
    (r.tid, r.t_enter_ns, r.call_raw)
}

/// A `Source` behind a reference is the same source (so a stream can borrow bytes in memory).
impl<T: Source + ?Sized> Source for &T {
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
}

/// A dump opened for streaming: everything `decode` gives but the records, which
/// [`DumpStream::for_each_record`] reads from the file when asked.
pub struct DumpStream<S: Source> {
    src: S,
    g: Geo,
    rings: Vec<RingPlan>,
    /// Keys of keep-ring copies whose original is still in its thread ring (sorted): not shown.
    copied: Vec<CopyKey>,
    dump: Dump,
}

/// Opens a dump file for streaming (a regular file only, as [`read_dump`]).
pub fn open_stream(path: &Path) -> Result<DumpStream<std::fs::File>, DumpError> {
    let file = open_dump_file(path)?;
    DumpStream::new(file, path)
}

/// Where one ring's slots are and what the first pass learnt about them.
struct RingPlan {
    ring: u32,
    offset: u64,
    cap: u64,
    head: u64,
    /// Slots read (the head's and one more, at most the ring, at most what the file holds).
    used: usize,
    /// The highest sequence number of a good slot: slots a lap older are overwritten.
    max_seq: u64,
}

/// What a slot holds, by `read_ring`'s checks.
enum Slot {
    Empty,
    /// Being written (odd commit) or rewritten while read: counted, not shown.
    Torn,
    /// A commit word that cannot be this slot's (damage): warned about, not shown.
    Misplaced(u64),
    Good(u64),
}

fn classify(commit: u64, changed: bool, idx: usize, cap: u64, head: u64) -> Slot {
    if commit == 0 {
        return Slot::Empty;
    }
    let seq = commit >> 1;
    if commit & 1 == 0 || changed {
        return Slot::Torn;
    }
    if seq == 0 || (seq - 1) % cap != idx as u64 || seq > head.saturating_add(1) {
        return Slot::Misplaced(commit);
    }
    Slot::Good(seq)
}

/// Slots older than one lap were overwritten by a newer lap (`read_ring` drops them).
fn is_stale(seq: u64, cap: u64, max_seq: u64) -> bool {
    seq.saturating_add(cap) <= max_seq
}

/// The chunk buffers, allocated once per pass.
struct Chunks {
    first: Vec<u8>,
    /// The second read of a file still being written (empty for a finished one: no recheck).
    again: Vec<u8>,
}

impl Chunks {
    fn new(live: bool) -> Self {
        Chunks {
            first: vec![0; CHUNK_SLOTS * SLOT_SIZE],
            again: if live {
                vec![0; CHUNK_SLOTS * SLOT_SIZE]
            } else {
                Vec::new()
            },
        }
    }
}

/// Visits slots `range` of a ring in index order: each slot's bytes and whether its commit word
/// changed between two reads (the seqlock check of a file still being written; `live` only).
fn each_slot<S: Source + ?Sized>(
    src: &S,
    plan: &RingPlan,
    range: Range<usize>,
    chunks: &mut Chunks,
    f: &mut dyn FnMut(usize, &[u8; SLOT_SIZE], bool),
) -> io::Result<()> {
    let mut at = range.start;
    while at < range.end {
        let n = (range.end - at).min(CHUNK_SLOTS);
        let offset = plan.offset + (at * SLOT_SIZE) as u64;
        let buf = &mut chunks.first[..n * SLOT_SIZE];
        src.read_at(offset, buf)?;
        let buf = &*buf;
        // As in `read_ring`: a second read that fails checks nothing.
        let again: Option<&[u8]> = if chunks.again.is_empty() {
            None
        } else {
            let a = &mut chunks.again[..n * SLOT_SIZE];
            src.read_at(offset, a).is_ok().then_some(&*a)
        };
        for (i, s) in buf.as_chunks::<SLOT_SIZE>().0.iter().enumerate() {
            let changed = again.is_some_and(|a| u64_at(a, i * SLOT_SIZE) != u64_at(s, 0));
            f(at + i, s, changed);
        }
        at += n;
    }
    Ok(())
}

/// Visits all slots of a ring from slot `from` on, wrapping round to the slots before it.
fn each_slot_from<S: Source + ?Sized>(
    src: &S,
    plan: &RingPlan,
    from: usize,
    chunks: &mut Chunks,
    f: &mut dyn FnMut(usize, &[u8; SLOT_SIZE], bool),
) -> io::Result<()> {
    let from = from.min(plan.used);
    each_slot(src, plan, from..plan.used, chunks, f)?;
    each_slot(src, plan, 0..from, chunks, f)
}

/// What the first pass gathers across rings besides the ring lines and counts.
#[derive(Default)]
struct Gathered {
    /// Keep-ring copies (with their blob), in the records that stay after the stale ones go.
    copies: Vec<(CopyKey, u64)>,
    /// Blobs the other records point to (where a format-2 tail walk that stopped looks).
    pointed: BTreeSet<u64>,
}

impl<S: Source> DumpStream<S> {
    /// Reads the header, counts every ring (first pass), reads the blobs and the communicator
    /// table; the records are read by [`DumpStream::for_each_record`].
    pub fn new(src: S, path: &Path) -> Result<Self, DumpError> {
        let (dump, g) = decode_header(&src, path)?;
        let mut s = DumpStream {
            src,
            g,
            rings: Vec::new(),
            copied: Vec::new(),
            dump,
        };
        let mut gathered = Gathered::default();
        let has_keep = s.plan_rings(&mut gathered);
        if has_keep && !gathered.copies.is_empty() {
            s.find_copied(&gathered.copies);
        }
        for (key, blob) in &gathered.copies {
            if *blob != 0 && s.copied.binary_search(key).is_err() {
                gathered.pointed.insert(*blob);
            }
        }
        s.read_blobs_pointed(&gathered.pointed);
        read_comm_table(&s.src, &s.g, &mut s.dump);
        Ok(s)
    }

    /// Everything but the records: header, rings, blobs, summary, warnings, communicators.
    pub fn dump(&self) -> &Dump {
        &self.dump
    }

    /// Hands every record to `f` in `decode`'s order, reading the rings again. Returns warnings
    /// about rings that became unreadable since the first pass (a file shrinking under us).
    pub fn for_each_record<E>(
        &self,
        mut f: impl FnMut(&Record) -> Result<(), E>,
    ) -> Result<Vec<Warning>, E> {
        self.visit_records(&mut |r| {
            if r.flags & KEEP_COPY != 0 && self.copied.binary_search(&copy_key(r)).is_ok() {
                return Ok(());
            }
            f(r)
        })
    }

    /// Every record that `read_rings` keeps before `drop_kept_copies`, in its order: each ring
    /// walked from the slot of its oldest kept sequence number, which is sequence order (a
    /// good slot's number fixes its index, and the kept numbers lie within one lap).
    fn visit_records<E>(
        &self,
        f: &mut dyn FnMut(&Record) -> Result<(), E>,
    ) -> Result<Vec<Warning>, E> {
        let mut late = Vec::new();
        let mut chunks = Chunks::new(self.dump.header.writer_alive);
        for plan in &self.rings {
            if plan.cap == 0 {
                continue;
            }
            let oldest_slot = (plan.max_seq % plan.cap) as usize;
            let mut clock = self.g.time_base.cursor();
            let mut failed = Ok(());
            let read = each_slot_from(
                &self.src,
                plan,
                oldest_slot,
                &mut chunks,
                &mut |idx, s, changed| {
                    if failed.is_err() {
                        return;
                    }
                    let Slot::Good(seq) = classify(u64_at(s, 0), changed, idx, plan.cap, plan.head)
                    else {
                        return;
                    };
                    if is_stale(seq, plan.cap, plan.max_seq) {
                        return;
                    }
                    failed = f(&record_from_slot(&mut clock, plan.ring, seq, s));
                },
            );
            failed?;
            if let Err(err) = read {
                late.push(Warning {
                    offset: plan.offset,
                    message: format!("ring {} unreadable on the second read: {err}", plan.ring),
                });
            }
        }
        Ok(late)
    }

    /// The first pass: `read_rings`' choice of rings and `read_ring`'s counts and warnings,
    /// ring by ring in the same order. Returns whether the dump has a keep ring.
    fn plan_rings(&mut self, gathered: &mut Gathered) -> bool {
        let g = &self.g;
        let (grows, rings_offset, overflow_slots) = (g.grows, g.rings_offset, g.overflow_slots);
        let ring_count = self.dump.header.ring_count;
        let cap = u64::from(self.dump.header.slots_per_ring);
        let dir_len = (u64::from(ring_count) + 1) * RING_DIR_ENTRY_SIZE as u64;
        if g.ring_dir_offset + dir_len > g.len {
            self.dump.warnings.push(Warning {
                offset: g.ring_dir_offset,
                message: "ring directory cut off by truncation; no records readable".into(),
            });
            return false;
        }
        let mut dir = vec![0u8; dir_len as usize];
        if let Err(e) = self.src.read_at(g.ring_dir_offset, &mut dir) {
            self.dump.warnings.push(Warning {
                offset: g.ring_dir_offset,
                message: format!("ring directory unreadable: {e}"),
            });
            return false;
        }
        let has_keep = g.keep_slots > 0 && g.keep_dir.len() == RING_DIR_ENTRY_SIZE;
        let mut chunks = Chunks::new(self.dump.header.writer_alive);
        for ring in 0..=ring_count {
            let e = &dir[ring as usize * RING_DIR_ENTRY_SIZE..][..RING_DIR_ENTRY_SIZE];
            let overflow = ring == ring_count;
            let place = if !grows {
                let offset = rings_offset + u64::from(ring) * cap * SLOT_SIZE as u64;
                Some((offset, cap))
            } else if overflow {
                Some((rings_offset, u64::from(overflow_slots)))
            } else {
                self.grown_ring_place(ring, e)
            };
            if let Some((offset, ring_cap)) = place {
                self.plan_ring(ring, e, offset, ring_cap, overflow, &mut chunks, gathered);
            }
        }
        if has_keep {
            let e = self.g.keep_dir.clone();
            let (offset, keep_cap) = (self.g.keep_offset, u64::from(self.g.keep_slots));
            self.plan_ring(
                ring_count + 1,
                &e,
                offset,
                keep_cap,
                true,
                &mut chunks,
                gathered,
            );
        }
        has_keep
    }

    /// `read_grown_ring`'s placement of a format-2 thread ring (None: no slots to read).
    fn grown_ring_place(&mut self, ring: u32, e: &[u8]) -> Option<(u64, u64)> {
        let g = &self.g;
        if u32_at(e, 4) != ring_state::CLAIMED {
            return None;
        }
        let (offset, slots) = (u64_at(e, 40), u32_at(e, 48));
        let fits = offset >= g.arena_offset
            && offset.is_multiple_of(4096)
            && slots == self.dump.header.slots_per_ring
            && offset
                .checked_add(u64::from(slots) * SLOT_SIZE as u64)
                .is_some_and(|end| end <= g.tail_end.max(g.arena_offset));
        if !fits {
            self.dump.warnings.push(Warning {
                offset: g.ring_dir_offset + u64::from(ring) * RING_DIR_ENTRY_SIZE as u64,
                message: format!(
                    "ring {ring}: slots at offset {offset} ({slots} slots) lie outside the file's tail"
                ),
            });
            return None;
        }
        Some((offset, u64::from(slots)))
    }

    /// One ring of the first pass: its line, counts and warnings as `read_ring` makes them.
    #[allow(clippy::too_many_arguments)] // one ring's coordinates, all needed
    fn plan_ring(
        &mut self,
        ring: u32,
        e: &[u8],
        offset: u64,
        cap: u64,
        shared: bool,
        chunks: &mut Chunks,
        gathered: &mut Gathered,
    ) {
        let (state, head) = (u32_at(e, 4), u64_at(e, 8));
        if state == 0 && head == 0 {
            return;
        }
        let mut used = head.saturating_add(1).min(cap);
        let present = self.g.len.saturating_sub(offset) / SLOT_SIZE as u64;
        if present < used {
            self.dump.warnings.push(Warning {
                offset: offset + present * SLOT_SIZE as u64,
                message: format!(
                    "ring {ring} cut off by truncation after {present} of {used} slots"
                ),
            });
            used = present;
        }
        let mut plan = RingPlan {
            ring,
            offset,
            cap,
            head,
            used: used as usize,
            max_seq: 0,
        };
        // Pass one: where the oldest committed slot is (the walk starts there, as `read_ring`
        // reads its slots) and the newest good sequence number (what is a lap older is gone).
        let mut oldest: Option<(u64, usize)> = None;
        let mut max_seq = 0;
        let scanned = each_slot(
            &self.src,
            &plan,
            0..plan.used,
            chunks,
            &mut |idx, s, changed| {
                let commit = u64_at(s, 0);
                if commit & 1 == 1 {
                    let here = (commit >> 1, idx);
                    oldest = Some(oldest.map_or(here, |o| o.min(here)));
                }
                if let Slot::Good(seq) = classify(commit, changed, idx, cap, head) {
                    max_seq = max_seq.max(seq);
                }
            },
        );
        plan.max_seq = max_seq;
        // Pass two, in `read_ring`'s order: torn slots, misplaced ones, the records kept.
        let mut info = RingInfo {
            lost: max_seq.saturating_sub(cap),
            ..RingInfo::from_dir_entry(ring, e, shared)
        };
        let mut in_flight = 0u64;
        let mut warnings = Vec::new();
        let mut clock = self.g.time_base.cursor();
        let counted = scanned.and_then(|()| {
            let start = oldest.map_or(0, |(_, idx)| idx);
            each_slot_from(&self.src, &plan, start, chunks, &mut |idx, s, changed| {
                let commit = u64_at(s, 0);
                match classify(commit, changed, idx, cap, head) {
                    Slot::Empty => {}
                    Slot::Torn => info.torn += 1,
                    Slot::Misplaced(commit) => warnings.push(Warning {
                        offset: offset + (idx * SLOT_SIZE) as u64,
                        message: format!(
                            "ring {ring} slot {idx}: commit word {commit:#x} does not belong here"
                        ),
                    }),
                    Slot::Good(seq) if is_stale(seq, cap, max_seq) => {}
                    Slot::Good(seq) => {
                        let r = record_from_slot(&mut clock, ring, seq, s);
                        info.records += 1;
                        if r.in_flight() && r.kind() == Some(RecordKind::Call) {
                            in_flight += 1;
                        }
                        if r.flags & KEEP_COPY != 0 {
                            gathered.copies.push((copy_key(&r), r.blob));
                        } else if r.blob != 0 {
                            gathered.pointed.insert(r.blob);
                        }
                    }
                }
            })
        });
        if let Err(err) = counted {
            // `read_ring` reads a ring whole: one that cannot be read gives no line at all.
            self.dump.warnings.push(Warning {
                offset,
                message: format!("ring {ring} unreadable: {err}"),
            });
            return;
        }
        self.dump.warnings.append(&mut warnings);
        let summary = &mut self.dump.summary;
        summary.records = summary.records.saturating_add(info.records);
        summary.torn = summary.torn.saturating_add(info.torn);
        summary.lost = summary.lost.saturating_add(info.lost);
        summary.in_flight = summary.in_flight.saturating_add(in_flight);
        self.dump.rings.push(info);
        self.rings.push(plan);
    }

    /// `drop_kept_copies`: a copy is dropped while a record that is no copy has its key.
    fn find_copied(&mut self, copies: &[(CopyKey, u64)]) {
        let mut keys: Vec<CopyKey> = copies.iter().map(|(k, _)| *k).collect();
        keys.sort_unstable();
        let mut copied = Vec::new();
        let _ = self.visit_records(&mut |r| {
            if r.flags & KEEP_COPY == 0 && keys.binary_search(&copy_key(r)).is_ok() {
                copied.push(copy_key(r));
            }
            Ok::<(), std::convert::Infallible>(())
        });
        copied.sort_unstable();
        copied.dedup();
        let dropped = keys
            .iter()
            .filter(|k| copied.binary_search(k).is_ok())
            .count() as u64;
        self.dump.summary.records = self.dump.summary.records.saturating_sub(dropped);
        self.copied = copied;
    }

    /// `read_blobs`, whose format-2 tail walk, when it stops early, looks further for the blobs
    /// records point to: those are handed to it as stand-in records carrying only the offset.
    fn read_blobs_pointed(&mut self, pointed: &BTreeSet<u64>) {
        self.dump.records = pointed.iter().map(|&blob| blob_pointer(blob)).collect();
        read_blobs(&self.src, &self.g, &mut self.dump);
        self.dump.records = Vec::new();
    }
}

/// A stand-in record that only points to a blob (see `read_blobs_pointed`).
fn blob_pointer(blob: u64) -> Record {
    Record {
        ring: 0,
        seq: 0,
        tid: 0,
        kind_raw: 0,
        call_raw: 0,
        t_enter_ns: 0,
        t_exit_ns: None,
        rc: 0,
        flags: 0,
        comm: 0,
        blob,
        args: [0; SLOT_ARGS],
    }
}
