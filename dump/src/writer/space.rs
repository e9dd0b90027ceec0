//! Where records and blobs go in the file: a thread's ring claimed (or the overflow ring), the
//! growing tail's extents allocated and committed (reopen by path, same file, `posix_fallocate`,
//! prefault), the keep ring, the communicator table and blobs.

use super::anchors::refresh_anchor;
use super::file::{current_tid, file_id_of, prefault, within_file_size_limit};
use super::recorder::Recorder;
use super::ring::RingWriter;
use crate::clock;
use ncclshim_format::layout::*;
use ncclshim_format::schema::BlobKind;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::Ordering;

impl Recorder {
    pub(super) fn dir_entry(&self, ring: u32) -> &RingDirEntry {
        debug_assert!(ring < self.geometry.total_rings());
        // SAFETY: ring < total_rings, so the entry lies inside the mapped ring directory, which
        // is 8-byte aligned (page-aligned start, 64-byte entries).
        unsafe {
            &*self
                .base
                .add(self.geometry.ring_dir_entry_offset(ring) as usize)
                .cast::<RingDirEntry>()
        }
    }

    /// A writer on ring `ring`, whose `slots` slots start at file offset `slots_offset`.
    pub(super) fn ring_writer(
        &self,
        ring: u32,
        slots_offset: u64,
        slots: u32,
        tid: u32,
        shared: bool,
    ) -> RingWriter {
        RingWriter {
            header: self.header(),
            dir: self.dir_entry(ring),
            // SAFETY: the ring's slot array lies inside the mapping and was allocated (the
            // overflow ring at creation, a thread's ring by `allocate` before this call).
            slots: unsafe { self.base.add(slots_offset as usize).cast::<Slot>() },
            mask: u64::from(slots) - 1,
            ring,
            tid,
            shared,
        }
    }

    pub(super) fn overflow_writer(&self, tid: u32) -> RingWriter {
        let g = &self.geometry;
        self.ring_writer(
            g.overflow_ring(),
            g.rings_offset,
            g.overflow_slots,
            tid,
            true,
        )
    }

    /// Gives the calling thread a ring of its own, allocating its slots at the end of the file
    /// (or the shared overflow ring once all are taken or when the allocation fails). Rare
    /// path: once per thread.
    pub fn claim_ring(&self) -> RingWriter {
        let tid = current_tid();
        let h = self.header();
        let idx = h.next_ring.fetch_add(1, Ordering::Relaxed);
        refresh_anchor(h);
        if idx >= self.geometry.ring_count {
            h.flags.fetch_or(flags::RINGS_EXHAUSTED, Ordering::Relaxed);
            return self.overflow_writer(tid);
        }
        let entry = self.dir_entry(idx);
        let slots = self.geometry.slots_per_ring;
        let bytes = u64::from(slots) * SLOT_SIZE as u64;
        let extent = self.append_extent(BlobKind::RingSlots, bytes, true);
        // SAFETY: this thread just took index `idx` with fetch_add, so it is the only writer of
        // the entry's plain fields; readers look at them only once `state` is published.
        unsafe {
            let e = (entry as *const RingDirEntry).cast_mut();
            (*e).claimed_ns = clock::monotonic_ns();
            if let Some(at) = extent {
                (*e).slots_offset = at + BLOB_HEADER_SIZE as u64;
                (*e).slots = slots;
            }
        }
        entry.tid.store(tid, Ordering::Relaxed);
        let Some(at) = extent else {
            h.ext2.ring_alloc_failed.fetch_add(1, Ordering::Relaxed);
            h.flags.fetch_or(flags::ALLOC_FAILED, Ordering::Relaxed);
            entry
                .state
                .store(ring_state::ALLOC_FAILED, Ordering::Release);
            return self.overflow_writer(tid);
        };
        self.commit_extent(at);
        entry.state.store(ring_state::CLAIMED, Ordering::Release);
        h.ext2.rings_materialized.fetch_add(1, Ordering::Release);
        let writer = self.ring_writer(idx, at + BLOB_HEADER_SIZE as u64, slots, tid, false);
        writer.refresh_thread_name();
        writer
    }

    /// Reserves an extent of `len` payload bytes at the end of the tail, allocates it on disk
    /// and writes its header (not yet committed); returns the header's file offset. A
    /// `page_aligned` extent gets its payload on a page boundary, after a `Pad` extent. `None`
    /// when the tail is full or the allocation failed (the reserved bytes then stay a hole a
    /// reader skips by the offsets that point past it).
    pub(super) fn append_extent(
        &self,
        kind: BlobKind,
        len: u64,
        page_aligned: bool,
    ) -> Option<u64> {
        let g = &self.geometry;
        let tail = &self.header().ext2.tail_reserved;
        let mut used = tail.load(Ordering::Relaxed);
        let (start, at, end) = loop {
            let start = g.arena_offset + used;
            let at = if page_aligned {
                round_up(start + 2 * BLOB_HEADER_SIZE as u64, 4096)? - BLOB_HEADER_SIZE as u64
            } else {
                start
            };
            let end = at + ((BLOB_HEADER_SIZE as u64 + len + 7) & !7);
            if end - g.arena_offset > g.tail_max {
                return None;
            }
            match tail.compare_exchange_weak(
                used,
                end - g.arena_offset,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break (start, at, end),
                Err(now) => used = now,
            }
        };
        if !self.allocate(start, end - start) {
            return None;
        }
        // SAFETY: [start, end) was reserved for this call alone by the CAS above, is allocated
        // in the file and lies inside the mapping (end <= arena_offset + tail_max); headers
        // are 8-aligned (every extent length is a multiple of 8).
        unsafe {
            if at > start {
                let pad = self.base.add(start as usize).cast::<BlobHeader>();
                ptr::addr_of_mut!((*pad).len).write((at - start) as u32 - BLOB_HEADER_SIZE as u32);
                ptr::addr_of_mut!((*pad).kind).write(BlobKind::Pad as u16);
                (*pad).commit.store(BLOB_COMMITTED, Ordering::Release);
            }
            let bh = self.base.add(at as usize).cast::<BlobHeader>();
            ptr::addr_of_mut!((*bh).len).write(u32::try_from(len).ok()?);
            ptr::addr_of_mut!((*bh).kind).write(kind as u16);
        }
        Some(at)
    }

    /// Publishes an extent written by `append_extent` once its payload is complete.
    pub(super) fn commit_extent(&self, at: u64) {
        // SAFETY: `at` is the header of an extent this caller allocated and wrote.
        unsafe {
            let bh = self.base.add(at as usize).cast::<BlobHeader>();
            (*bh).commit.store(BLOB_COMMITTED, Ordering::Release);
        }
    }

    /// Makes `[offset, offset + len)` of the file real: reopens the file by its path, checks it
    /// is still the file we mapped (a moved or replaced file is never grown), allocates the
    /// range with `posix_fallocate` (so a full disk fails here, never as a SIGBUS on a later
    /// store) and prefaults it. Rare path: a ring claim or a blob.
    pub(super) fn allocate(&self, offset: u64, len: u64) -> bool {
        if self.mapping_lost() {
            // The file was truncated under us: never grow it again.
            return false;
        }
        let Ok(c) = CString::new(self.path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: c is a valid NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return false;
        }
        let ok = file_id_of(fd) == Some(self.file_id)
            && within_file_size_limit(offset.saturating_add(len))
            && match (libc::off_t::try_from(offset), libc::off_t::try_from(len)) {
                // SAFETY: fd is a valid, open, writable descriptor of our own dump file.
                (Ok(o), Ok(l)) => unsafe { libc::posix_fallocate(fd, o, l) == 0 },
                _ => false,
            };
        // SAFETY: fd was opened above and is closed exactly once.
        unsafe { libc::close(fd) };
        if ok {
            let page = offset & !4095;
            // SAFETY: the range lies inside the mapping and is now backed by the file.
            prefault(
                unsafe { self.base.add(page as usize) },
                (offset + len - page) as usize,
            );
        }
        ok
    }

    /// The ring index the reader gives the keep ring's records (one past the overflow ring).
    pub fn keep_ring_index(&self) -> u32 {
        self.geometry.total_rings()
    }

    /// A writer on the keep ring for the thread `tid`: rare records (communicator lifecycle,
    /// snapshots, errors) go there so that no number of hot records can overwrite them. Shared
    /// by every thread (sequence numbers reserved with `fetch_add`, like the overflow ring).
    /// `None` for a file without one.
    pub fn keep_writer(&self, tid: u32) -> Option<RingWriter> {
        let g = &self.geometry;
        if g.keep_slots == 0 || !g.keep_slots.is_power_of_two() {
            return None;
        }
        let h = self.header();
        Some(RingWriter {
            header: h,
            dir: &h.ext.keep_dir,
            // SAFETY: the keep ring lies inside the mapping (Geometry checked its size).
            slots: unsafe { self.base.add(g.keep_offset as usize).cast::<Slot>() },
            mask: u64::from(g.keep_slots) - 1,
            ring: self.keep_ring_index(),
            tid,
            shared: true,
        })
    }

    /// The keep ring for the thread that owns `w`, or `w` itself in a file without one.
    pub fn keep_writer_or(&self, w: &RingWriter) -> RingWriter {
        self.keep_writer(w.tid()).unwrap_or(*w)
    }

    /// Claims the next communicator-table entry (zeroed, state FREE) for a new communicator;
    /// `None` once the table is full (the count of misses stays visible in `comm_next`).
    pub fn claim_comm_entry(&self) -> Option<&'static CommTableEntry> {
        let g = &self.geometry;
        let idx = self.header().ext.comm_next.fetch_add(1, Ordering::Relaxed);
        if idx >= g.comm_entries {
            return None;
        }
        // SAFETY: idx < comm_entries, so the entry lies inside the mapping (page-aligned table
        // of 128-byte entries); the fetch_add gave it to this caller alone, and the mapping is
        // never unmapped, so the reference may be 'static.
        Some(unsafe {
            &*self
                .base
                .add(g.comm_entry_offset(idx) as usize)
                .cast::<CommTableEntry>()
        })
    }

    /// Appends a blob to the arena; returns its file offset, or 0 when the arena is full (the
    /// blob is dropped and counted; earlier blobs stay).
    pub fn append_blob(&self, kind: BlobKind, payload: &[u8]) -> u64 {
        let h = self.header();
        refresh_anchor(h);
        let Ok(len) = u32::try_from(payload.len()) else {
            h.dropped_blobs.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        let need = (BLOB_HEADER_SIZE as u64 + u64::from(len) + 7) & !7;
        let start = h.arena_tail.fetch_add(need, Ordering::Relaxed);
        if start.saturating_add(need) > self.geometry.arena_size {
            h.flags.fetch_or(flags::ARENA_FULL, Ordering::Relaxed);
            h.dropped_blobs.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let Some(offset) = self.append_extent(kind, u64::from(len), false) else {
            h.flags.fetch_or(flags::ALLOC_FAILED, Ordering::Relaxed);
            h.dropped_blobs.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        // SAFETY: the extent's payload [offset + 16, offset + 16 + len) was allocated and
        // reserved for this call alone by `append_extent`.
        unsafe {
            let p = self.base.add(offset as usize);
            ptr::copy_nonoverlapping(payload.as_ptr(), p.add(BLOB_HEADER_SIZE), payload.len());
        }
        self.commit_extent(offset);
        offset
    }
}
