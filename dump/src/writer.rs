//! The crash-safe writer: creates one dump file, hands each thread its own ring, and records
//! 128-byte slots with the commit-word protocol. Everything written is in a `MAP_SHARED` file
//! mapping the moment it is stored, so SIGKILL or a segfault loses at most the slot being written.
//!
//! Creation does all the work that can fail for the fixed part (open `O_EXCL` 0600,
//! `posix_fallocate`, `mmap` of the largest size the file may reach, prefault). The file then
//! grows only on rare paths: a thread's first event allocates its ring, a blob allocates its
//! bytes (reopen by path, check it is still our file, `posix_fallocate` the new extent, prefault
//! it). A failed allocation sends the thread to the overflow ring (or drops the blob), counted.
//! The record path makes no allocation, takes no lock and makes no syscall beyond the vDSO
//! clock read; the mapping is never unmapped.

use crate::clock;
use crate::config::{file_name, RecorderConfig};
use crate::dumpdir::{create_in, open_dump_dir, DirError};
use crate::identity::ProcessIdentity;
use ncclshim_format::layout::*;
use ncclshim_format::schema::{BlobKind, CallId, RecordKind, SlotRef};
use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{fence, Ordering};

/// Why a dump file could not be created. Each one turns recording off; the host never notices.
#[derive(Debug)]
pub struct CreateError {
    pub step: &'static str,
    pub path: PathBuf,
    pub errno: i32,
    /// Set when the dump directory exists but is not safe to use: the sentence saying why.
    pub refused: Option<String>,
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.refused {
            return write!(f, "refusing dump directory {}: {why}", self.path.display());
        }
        let msg = std::io::Error::from_raw_os_error(self.errno);
        write!(
            f,
            "{} failed for {}: {}",
            self.step,
            self.path.display(),
            msg
        )
    }
}

impl std::error::Error for CreateError {}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// One open, mapped dump file. Lives for the rest of the process (its mapping is never unmapped).
pub struct Recorder {
    base: *mut u8,
    geometry: Geometry,
    /// Absolute, so that growing the file still finds it after the host changes directory.
    path: PathBuf,
    /// `(st_dev, st_ino)` of the file: growth reopens `path` and refuses any other file there.
    file_id: (u64, u64),
    /// The mapping's slot in [`fault_guard`](crate::fault_guard) (`None`: not guarded).
    guard_slot: Option<usize>,
}

// SAFETY: the mapping is shared memory; all concurrent access goes through atomics (header live
// fields, ring heads, commit words) or through slots that exactly one thread owns at a time.
unsafe impl Send for Recorder {}
// SAFETY: as above.
unsafe impl Sync for Recorder {}

/// The fields of one record, as the caller knows them at entry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub kind: RecordKind,
    pub call: CallId,
    pub comm: u64,
    pub flags: u32,
    pub rc: i32,
    pub blob: u64,
    pub args: [u64; SLOT_ARGS],
}

impl Entry {
    pub fn new(kind: RecordKind, call: CallId) -> Self {
        Self {
            kind,
            call,
            comm: 0,
            flags: 0,
            rc: 0,
            blob: 0,
            args: [0; SLOT_ARGS],
        }
    }
}

/// A thread's handle on its ring. Plain data (`Copy`) so it can live in a const-initialized
/// thread-local with no destructor.
#[derive(Debug, Clone, Copy)]
pub struct RingWriter {
    header: *const FileHeader,
    dir: *const RingDirEntry,
    slots: *mut Slot,
    mask: u64,
    ring: u32,
    tid: u32,
    shared: bool,
}

/// A call recorded at entry whose completion is still to be written.
#[must_use = "complete() the call, or it stays in flight in the dump"]
pub struct PendingCall {
    slot: *mut Slot,
    commit: u64,
    slot_ref: SlotRef,
}

impl RingWriter {
    /// A writer attached to nothing: a placeholder for a thread-local cache entry that is not
    /// filled yet. Never written through (the cache checks its generation first).
    pub const DETACHED: Self = Self {
        header: ptr::null(),
        dir: ptr::null(),
        slots: ptr::null_mut(),
        mask: 0,
        ring: u32::MAX,
        tid: 0,
        shared: true,
    };
}

impl Recorder {
    /// Creates the dump file described by `config` and maps it. Creates the directory if needed.
    pub fn create(config: &RecorderConfig) -> Result<Self, CreateError> {
        let identity = ProcessIdentity::current();
        Self::create_with_identity(config, &identity)
    }

    pub fn create_with_identity(
        config: &RecorderConfig,
        identity: &ProcessIdentity,
    ) -> Result<Self, CreateError> {
        let cfg = config.clone().normalized();
        let fail = |step, path: &Path, errno| CreateError {
            step,
            path: path.to_path_buf(),
            errno,
            refused: None,
        };
        let geometry = Geometry::grown(
            cfg.rings,
            cfg.slots_per_ring,
            cfg.arena_bytes,
            cfg.keep_slots,
            cfg.comm_entries,
            cfg.slots_per_ring.min(DEFAULT_OVERFLOW_SLOTS),
        )
        .filter(|g| usize::try_from(g.max_file_size()).is_ok())
        .ok_or_else(|| fail("sizing", &cfg.dir, libc::EOVERFLOW))?;
        let dir_fd = open_dump_dir(&cfg.dir, cfg.dir_policy).map_err(|e| match e {
            DirError::Os(step, errno) => fail(step, &cfg.dir, errno),
            DirError::Refused(why) => CreateError {
                refused: Some(why),
                ..fail("checking the dump directory", &cfg.dir, libc::EPERM)
            },
        })?;
        let dir = std::path::absolute(&cfg.dir).unwrap_or_else(|_| cfg.dir.clone());
        let base_name = file_name(
            &identity.hostname,
            identity.pid,
            identity.start_ticks,
            cfg.writer_kind,
        );
        let (fd, path) = open_exclusive(&dir_fd, &dir, &base_name)?;
        drop(dir_fd);
        let result = (|| {
            let size = libc::off_t::try_from(geometry.file_size)
                .ok()
                .filter(|_| within_file_size_limit(geometry.file_size))
                .ok_or_else(|| fail("sizing", &path, libc::EFBIG))?;
            // SAFETY: fd is a valid, open, writable descriptor.
            let rc = unsafe { libc::posix_fallocate(fd, 0, size) };
            if rc != 0 {
                return Err(fail("posix_fallocate", &path, rc));
            }
            let file_id = file_id_of(fd).ok_or_else(|| fail("fstat", &path, errno()))?;
            // SAFETY: a shared, writable mapping of the largest size the file may reach. Only
            // the allocated fixed part is touched now; a tail extent is touched only after it
            // was allocated (`Recorder::allocate`), so no access lands past the end of the file.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    geometry.max_file_size() as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(fail("mmap", &path, errno()));
            }
            prefault(base.cast::<u8>(), geometry.file_size as usize);
            Ok((base.cast::<u8>(), file_id))
        })();
        // SAFETY: fd was opened above and is closed exactly once; the mapping keeps the file.
        unsafe { libc::close(fd) };
        let (base, file_id) = match result {
            Ok(b) => b,
            Err(e) => {
                let c = CString::new(path.as_os_str().as_bytes()).unwrap_or_default();
                // SAFETY: c is a valid NUL-terminated path; unlinking our own half-made file.
                unsafe { libc::unlink(c.as_ptr()) };
                return Err(e);
            }
        };
        let guard_slot = crate::fault_guard::guard(base, geometry.max_file_size() as usize);
        let recorder = Self {
            base,
            geometry,
            path,
            file_id,
            guard_slot,
        };
        recorder.init_header(&cfg, identity);
        Ok(recorder)
    }

    fn init_header(&self, cfg: &RecorderConfig, id: &ProcessIdentity) {
        let g = &self.geometry;
        // SAFETY: the mapping is at least HEADER_SIZE bytes, page-aligned (so aligned for
        // FileHeader), zero-filled, and no other thread knows about it yet.
        let h = unsafe { &mut *self.base.cast::<FileHeader>() };
        h.major = FORMAT_MAJOR;
        h.minor = FORMAT_MINOR;
        h.endian = ENDIAN_MARKER;
        h.header_size = HEADER_SIZE as u32;
        h.slot_size = SLOT_SIZE as u32;
        h.page_size = 4096;
        h.writer_kind = cfg.writer_kind as u32;
        fill_fixed(&mut h.writer_version, env!("CARGO_PKG_VERSION").as_bytes());
        h.pid = id.pid;
        h.ppid = id.ppid;
        h.pid_start_ticks = id.start_ticks;
        h.ext2.pid_namespace = id.pid_namespace;
        fill_fixed(&mut h.boot_id, id.boot_id.as_bytes());
        fill_fixed(&mut h.hostname, id.hostname.as_bytes());
        fill_fixed(&mut h.clocksource, id.clocksource.as_bytes());
        h.clock = clock::calibrate();
        if clock::select() == clock::ClockKind::Tsc {
            let (hz, a, b) = clock::calibrate_tsc_hz();
            h.clock_kind = clock::ClockKind::Tsc as u32;
            h.tsc_hz = hz;
            add_anchor(h, a);
            add_anchor(h, b);
        }
        h.ring_count = g.ring_count;
        h.slots_per_ring = g.slots_per_ring;
        h.ring_dir_offset = g.ring_dir_offset;
        h.rings_offset = g.rings_offset;
        h.arena_offset = g.arena_offset;
        h.arena_size = g.arena_size;
        h.file_size = g.file_size;
        h.ext.keep_slots = g.keep_slots;
        h.ext.comm_entries = g.comm_entries;
        h.ext.keep_offset = g.keep_offset;
        h.ext.comm_offset = g.comm_offset;
        h.ext.keep_dir.state.store(1, Ordering::Relaxed);
        h.ext2.overflow_slots = g.overflow_slots;
        h.ext2.tail_max = g.tail_max;
        fill_fixed(&mut h.ext2.run_source, id.run.source.as_bytes());
        fill_fixed(&mut h.ext2.run_id, id.run.id.as_bytes());
        h.ext2.launcher_rank = id.run.rank;
        let overflow = self.dir_entry(g.overflow_ring());
        // SAFETY: no other thread knows the mapping yet.
        unsafe {
            let e = (overflow as *const RingDirEntry).cast_mut();
            (*e).slots_offset = g.rings_offset;
            (*e).slots = g.overflow_slots;
        }
        overflow.state.store(1, Ordering::Relaxed);
        // The magic goes last: a reader that sees it sees a complete header.
        fence(Ordering::Release);
        h.magic = MAGIC;
    }

    /// Whether the file was truncated under the live mapping (now anonymous memory; see
    /// [`fault_guard`](crate::fault_guard)).
    pub fn mapping_lost(&self) -> bool {
        self.guard_slot.is_some_and(crate::fault_guard::is_lost)
    }

    /// The mapping's start address (to match a fault address against).
    pub(crate) fn mapping_base(&self) -> usize {
        self.base as usize
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn header(&self) -> &FileHeader {
        // SAFETY: the header page is mapped for the recorder's lifetime and its mutable fields
        // are atomics.
        unsafe { &*self.base.cast::<FileHeader>() }
    }

    fn dir_entry(&self, ring: u32) -> &RingDirEntry {
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
    fn ring_writer(
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

    fn overflow_writer(&self, tid: u32) -> RingWriter {
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
    fn append_extent(&self, kind: BlobKind, len: u64, page_aligned: bool) -> Option<u64> {
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
    fn commit_extent(&self, at: u64) {
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
    fn allocate(&self, offset: u64, len: u64) -> bool {
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

    /// Notes a sign of life that writes no record (a deduplicated poll): raises `last_alive`.
    #[inline]
    pub fn note_alive(&self) {
        let t = clock::now();
        let alive = &self.header().ext.last_alive;
        if alive.load(Ordering::Relaxed) < t {
            alive.store(t, Ordering::Relaxed);
        }
    }

    /// The header's fatal-signal record (written by the shim's signal handler).
    pub fn signal_record(&self) -> &SignalRecord {
        &self.header().ext.signal
    }

    /// Counts a return of the program's own handler for a watched fatal signal (the shim's
    /// handler chained to it, and it came back: the process goes on).
    pub fn note_signal_handler_returned(&self) {
        self.header()
            .ext2
            .signal_handler_returns
            .fetch_add(1, Ordering::Relaxed);
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

    /// Sets header flag bits (`layout::flags`).
    pub fn set_flag(&self, bits: u32) {
        self.header().flags.fetch_or(bits, Ordering::Release);
    }

    pub fn add_counter(&self, index: usize, n: u64) {
        if let Some(c) = self.header().counters.get(index) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Records that the process called `exit` / `_exit` / `_Exit` with `status` (`via`:
    /// `layout::exit_via`). Async-signal-safe and allocation-free (a vDSO clock read and atomic
    /// stores into the never-unmapped mapping), so it may run inside `_exit` in a forked child.
    /// The last call wins: an atexit handler that calls `_exit` replaces `exit`'s record.
    pub fn mark_exit_call(&self, via: u32, status: i32) {
        let x = &self.header().ext2;
        x.exit_status.store(status, Ordering::Relaxed);
        x.exit_call_monotonic_ns
            .store(clock::monotonic_ns(), Ordering::Relaxed);
        x.exit_via.store(via, Ordering::Release);
    }

    /// Marks a normal exit (from an atexit handler).
    pub fn mark_clean_exit(&self) {
        let h = self.header();
        h.exit_monotonic_ns
            .store(clock::monotonic_ns(), Ordering::Relaxed);
        h.flags.fetch_or(flags::CLEAN_EXIT, Ordering::Release);
    }
}

impl RingWriter {
    fn dir(&self) -> &RingDirEntry {
        // SAFETY: `dir` points into the recorder's mapping, which is never unmapped.
        unsafe { &*self.dir }
    }

    pub fn ring(&self) -> u32 {
        self.ring
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Copies the thread's current name into the ring directory (threads are often named
    /// after they start). Only the owner calls this, so the plain store is race-free.
    pub fn refresh_thread_name(&self) {
        if self.shared {
            return;
        }
        let mut buf = [0u8; 16];
        // SAFETY: buf is 16 bytes, the size pthread_getname_np requires at most.
        let rc = unsafe {
            libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr().cast(), buf.len())
        };
        if rc == 0 {
            // SAFETY: only the owning thread writes its entry's name.
            unsafe { ptr::addr_of_mut!((*self.dir.cast_mut()).name).write(buf) };
        }
    }

    #[inline]
    fn reserve(&self) -> u64 {
        let head = &self.dir().head;
        if self.shared {
            head.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            head.load(Ordering::Relaxed) + 1
        }
    }

    /// Writes one record and returns the slot; `t_exit` is `IN_FLIGHT` or `t_enter`.
    #[inline]
    fn write(&self, e: &Entry, in_flight: bool) -> (*mut Slot, u64, SlotRef) {
        let (slot, commit, slot_ref, _) = self.write_at(e, in_flight, None);
        (slot, commit, slot_ref)
    }

    /// As `write`, at time `at` (this process's record time base) instead of a clock read.
    #[inline]
    fn write_at(
        &self,
        e: &Entry,
        in_flight: bool,
        at: Option<u64>,
    ) -> (*mut Slot, u64, SlotRef, u64) {
        let seq = self.reserve();
        // SAFETY: the index is masked into the ring; the slot is owned by this thread (own ring,
        // or a sequence number reserved with fetch_add on the overflow ring).
        let slot = unsafe { self.slots.add((seq.wrapping_sub(1) & self.mask) as usize) };
        if seq & ANCHOR_EVERY_MASK == 0 {
            // SAFETY: the header lives as long as the mapping.
            refresh_anchor(unsafe { &*self.header });
        }
        let t = at.unwrap_or_else(clock::now);
        // SAFETY: `slot` is valid, aligned and owned (see above). The even commit word marks it
        // torn until the odd one is stored; the Release fence keeps field stores after it.
        unsafe {
            (*slot).commit.store(seq << 1, Ordering::Relaxed);
            fence(Ordering::Release);
            let s = &mut *slot;
            s.t_enter_ns = t;
            s.t_exit_ns
                .store(if in_flight { IN_FLIGHT } else { t }, Ordering::Relaxed);
            s.kind = e.kind as u16;
            s.call = e.call as u16;
            s.rc = e.rc;
            s.flags = e.flags;
            s.tid = self.tid;
            s.comm = e.comm;
            s.blob = e.blob;
            s.args = e.args;
            s.commit.store((seq << 1) | 1, Ordering::Release);
        }
        if !self.shared {
            self.dir().head.store(seq, Ordering::Release);
        }
        (
            slot,
            (seq << 1) | 1,
            SlotRef {
                ring: self.ring,
                seq,
            },
            t,
        )
    }

    /// Records a call at entry; it reads as in flight until `complete` is called.
    #[inline]
    pub fn begin(&self, e: &Entry) -> PendingCall {
        let (slot, commit, slot_ref) = self.write(e, true);
        PendingCall {
            slot,
            commit,
            slot_ref,
        }
    }

    /// Records something that happened at one instant.
    #[inline]
    pub fn instant(&self, e: &Entry) -> SlotRef {
        self.write(e, false).2
    }

    /// As [`begin`](Self::begin) at time `t` (this process's record time base) instead of a
    /// clock read: a copy of a call made earlier, completed with [`PendingCall::complete`].
    #[inline]
    pub fn begin_at(&self, e: &Entry, t: u64) -> PendingCall {
        let (slot, commit, slot_ref, _) = self.write_at(e, true, Some(t));
        PendingCall {
            slot,
            commit,
            slot_ref,
        }
    }

    /// Records something at a time taken earlier (a value of [`clock::now`] or a record's
    /// `t_enter`), without reading the clock. The caller flags the record to say whose time
    /// it carries.
    #[inline]
    pub fn instant_at(&self, e: &Entry, t: u64) -> SlotRef {
        self.write_at(e, false, Some(t)).2
    }

    /// As [`begin`](Self::begin) for a caller that completes the record later by its
    /// reference ([`reopen`](Self::reopen)) or never (a record that ends at another one): the
    /// record's reference and its entry time, which the slot write already has in a register.
    #[inline]
    pub fn begin_ref(&self, e: &Entry) -> (SlotRef, u64) {
        let (_, _, slot_ref, t) = self.write_at(e, true, None);
        (slot_ref, t)
    }

    /// Takes up again a record this thread started with [`begin`](Self::begin), to complete it
    /// in place (a profiler event stopped on the thread that started it, say). `None` when the
    /// record is in another thread's ring, in the shared overflow ring, or already overwritten
    /// by the ring wrapping: the caller then writes a separate record instead.
    #[inline]
    pub fn reopen(&self, r: SlotRef) -> Option<PendingCall> {
        if r.ring != self.ring || self.shared || r.seq == 0 {
            return None;
        }
        // SAFETY: the index is masked into this thread's own ring.
        let slot = unsafe { self.slots.add((r.seq.wrapping_sub(1) & self.mask) as usize) };
        let p = PendingCall {
            slot,
            commit: (r.seq << 1) | 1,
            slot_ref: r,
        };
        p.owned().map(|_| p)
    }
}

impl PendingCall {
    pub fn slot_ref(&self) -> SlotRef {
        self.slot_ref
    }

    /// The record's entry time (this process's record time base), 0 if the slot was lapped.
    #[inline]
    pub fn t_enter(&self) -> u64 {
        // SAFETY: the slot is ours (checked by `owned`) and only this thread writes it.
        self.owned().map_or(0, |s| unsafe { (*s).t_enter_ns })
    }

    /// The slot, if it still holds this call (always, on a thread's own ring; on the shared
    /// overflow ring another thread may have lapped it).
    #[inline]
    fn owned(&self) -> Option<*mut Slot> {
        // SAFETY: the slot stays mapped for the process lifetime; reading its atomic commit word.
        let commit = unsafe { (*self.slot).commit.load(Ordering::Relaxed) };
        (commit == self.commit).then_some(self.slot)
    }

    /// The record as written so far (to copy it elsewhere); `None` if the slot was lapped.
    pub fn entry(&self) -> Option<Entry> {
        let s = self.owned()?;
        // SAFETY: the slot is ours (checked by `owned`) and only this thread writes it.
        let s = unsafe { &*s };
        Some(Entry {
            kind: RecordKind::from_u16(s.kind)?,
            call: CallId::from_u16(s.call)?,
            comm: s.comm,
            flags: s.flags,
            rc: s.rc,
            blob: s.blob,
            args: s.args,
        })
    }

    /// Fills in a result argument (an output pointer's value, say) before completion.
    #[inline]
    pub fn set_arg(&self, index: usize, value: u64) {
        if let (Some(s), true) = (self.owned(), index < SLOT_ARGS) {
            // SAFETY: the slot is ours (checked by `owned`) and only this thread writes it.
            unsafe { (*s).args[index] = value };
        }
    }

    #[inline]
    pub fn set_comm(&self, comm: u64) {
        if let Some(s) = self.owned() {
            // SAFETY: as in `set_arg`.
            unsafe { (*s).comm = comm };
        }
    }

    /// Attaches a blob (error text, config) and ORs in flag bits.
    #[inline]
    pub fn set_blob(&self, blob: u64, flag_bits: u32) {
        if let Some(s) = self.owned() {
            // SAFETY: as in `set_arg`.
            unsafe {
                (*s).blob = blob;
                (*s).flags |= flag_bits;
            }
        }
    }

    /// Writes the return code, then the exit time (Release): the call is complete.
    #[inline]
    pub fn complete(self, rc: i32) {
        if let Some(s) = self.owned() {
            // SAFETY: as in `set_arg`; the Release store orders rc before the exit time.
            unsafe {
                (*s).rc = rc;
                (*s).t_exit_ns.store(clock::now(), Ordering::Release);
            }
        }
    }
}

/// The writer's side of the communicator table (the entry's layout is the format's; stamping
/// times with the recorder's clock is the runtime's): identity once, progress on every
/// operation. Plain atomic stores (no read-modify-write): one thread issues a communicator's
/// operations.
pub trait CommEntryWriter {
    /// Fills the identity of a newly claimed entry and publishes it (`state` last).
    #[allow(clippy::too_many_arguments)] // the communicator's identity, field by field
    fn publish(
        &self,
        created_by: CallId,
        comm: u64,
        comm_hash: u64,
        uid_hash: u64,
        nranks: i32,
        rank: i32,
        parent: (u64, i32, i32),
        ready: bool,
    );

    /// The communicator is ready: its size, rank (when they were unknown), device and NCCL
    /// version. Called by the thread that created it, before it issues any operation.
    fn ready(&self, nranks: i32, rank: i32, cuda_dev: i32, nccl_version: i32);

    /// An operation was issued: its arguments first, then the count that publishes them.
    #[allow(clippy::too_many_arguments)] // the operation's own arguments
    fn issue(
        &self,
        seq: u64,
        call: CallId,
        count: u64,
        datatype: i32,
        redop: i32,
        peer: i32,
        t: u64,
    );

    /// The call of operation `seq` returned `rc`.
    fn complete(&self, seq: u64, rc: i32);

    /// The communicator was destroyed (or aborted).
    fn end(&self, aborted: bool);
}

impl CommEntryWriter for CommTableEntry {
    #[allow(clippy::too_many_arguments)] // the communicator's identity, field by field
    fn publish(
        &self,
        created_by: CallId,
        comm: u64,
        comm_hash: u64,
        uid_hash: u64,
        nranks: i32,
        rank: i32,
        parent: (u64, i32, i32),
        ready: bool,
    ) {
        let me = (self as *const Self).cast_mut();
        // SAFETY: the entry was claimed by this caller alone (`Recorder::claim_comm_entry`) and
        // is not yet published (state FREE), so no one else writes its plain fields; readers
        // ignore it until `state` is stored below with Release.
        unsafe {
            (*me).created_by = created_by as u32;
            (*me).comm = comm;
            (*me).comm_hash = comm_hash;
            (*me).uid_hash = uid_hash;
            (*me).nranks = nranks;
            (*me).rank = rank;
            (*me).cuda_dev = -1;
            (*me).nccl_version = 0;
            (*me).parent_hash = parent.0;
            (*me).split_color = parent.1;
            (*me).split_key = parent.2;
            (*me).created_t = clock::now();
        }
        self.last_peer.store(-1, Ordering::Relaxed);
        self.last_dtype_op.store(0xffff, Ordering::Relaxed);
        let state = if ready {
            comm_state::LIVE
        } else {
            comm_state::PENDING
        };
        self.state.store(state, Ordering::Release);
    }

    fn ready(&self, nranks: i32, rank: i32, cuda_dev: i32, nccl_version: i32) {
        let me = (self as *const Self).cast_mut();
        // SAFETY: identity fields are written only by the creating thread (here, once the
        // communicator is ready); a concurrent reader may see the old or the new value of each
        // plain 4-byte field, both of which are meaningful.
        unsafe {
            (*me).nranks = nranks;
            (*me).rank = rank;
            (*me).cuda_dev = cuda_dev;
            (*me).nccl_version = nccl_version;
        }
        self.state.store(comm_state::LIVE, Ordering::Release);
    }

    #[inline]
    #[allow(clippy::too_many_arguments)] // the operation's own arguments
    fn issue(
        &self,
        seq: u64,
        call: CallId,
        count: u64,
        datatype: i32,
        redop: i32,
        peer: i32,
        t: u64,
    ) {
        let small = |v: i32| {
            if (0..0xff).contains(&v) {
                v as u32
            } else {
                0xff
            }
        };
        self.last_call.store(call as u32, Ordering::Relaxed);
        self.last_count.store(count, Ordering::Relaxed);
        self.last_dtype_op
            .store(small(datatype) | small(redop) << 8, Ordering::Relaxed);
        self.last_peer.store(peer, Ordering::Relaxed);
        self.last_t.store(t, Ordering::Relaxed);
        self.issued.store(seq.wrapping_add(1), Ordering::Release);
    }

    #[inline]
    fn complete(&self, seq: u64, rc: i32) {
        self.last_rc.store(rc, Ordering::Relaxed);
        self.completed.store(seq.wrapping_add(1), Ordering::Release);
    }

    fn end(&self, aborted: bool) {
        self.ended_t.store(clock::now(), Ordering::Relaxed);
        let state = if aborted {
            comm_state::ABORTED
        } else {
            comm_state::DESTROYED
        };
        self.state.store(state, Ordering::Release);
    }
}

/// A ring adds a clock anchor every this many records (a mask: every 16,384th), so a long job's
/// TSC-to-nanosecond conversion is refreshed without a clock_gettime on the ordinary path.
const ANCHOR_EVERY_MASK: u64 = (1 << 14) - 1;

fn add_anchor(h: &FileHeader, a: ncclshim_format::layout::ClockAnchor) {
    let n = h.next_anchor.fetch_add(1, Ordering::Relaxed);
    let slot = &h.anchors[n as usize % CLOCK_ANCHORS];
    // SAFETY: anchor slots are reserved by the fetch_add above; the one writer of this slot
    // invalidates it, fills it and publishes it (a writer 32 anchors later could collide only
    // after 32 more refreshes during these few stores; the reader drops implausible pairs).
    unsafe {
        let p = (slot as *const ncclshim_format::layout::ClockAnchor).cast_mut();
        (*p).seq.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        ptr::addr_of_mut!((*p).tsc).write(a.tsc);
        ptr::addr_of_mut!((*p).monotonic_ns).write(a.monotonic_ns);
        (*p).seq.store(u64::from(n) + 1, Ordering::Release);
    }
}

/// Adds an anchor to a TSC dump (rare paths only: ring claims, blobs, every 16,384 records),
/// out of line. `extern "C"` tells the compiler that no panic can unwind out of it into the
/// record path, which the profiler's unguarded hot path needs proven (`no_panic` there);
/// `no_panic` here proves the other half: nothing in it can panic, so the abort that an
/// unwinding `extern "C"` function would cause cannot happen.
#[cfg_attr(not(debug_assertions), no_panic::no_panic)]
#[cold]
#[inline(never)]
extern "C" fn refresh_anchor(h: &FileHeader) {
    if h.clock_kind == clock::ClockKind::Tsc as u32 {
        add_anchor(h, clock::anchor());
    }
}

/// Whether a file may reach `size` bytes under `RLIMIT_FSIZE`. Growing past the limit would
/// fail with EFBIG *and* send the process SIGXFSZ (whose default action kills it), so the
/// writer checks first and treats the limit like a full disk.
fn within_file_size_limit(size: u64) -> bool {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl) } != 0 {
        return false;
    }
    rl.rlim_cur == libc::RLIM_INFINITY || size <= rl.rlim_cur
}

/// `(st_dev, st_ino)` of an open file.
fn file_id_of(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open and st is a valid out-pointer.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Faults `[base, base + len)` of the mapping in without dirtying it (`MADV_POPULATE_READ`,
/// Linux 5.14+; on older kernels the first store takes a minor fault instead), so the record
/// path does not fault on every new page.
fn prefault(base: *mut u8, len: usize) {
    const MADV_POPULATE_READ: i32 = 22;
    // SAFETY: advice on a range inside our own mapping; a failure changes nothing.
    unsafe { libc::madvise(base.cast(), len, MADV_POPULATE_READ) };
}

/// The kernel thread id (a syscall: callers cache it with their ring).
pub fn current_tid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Creates the dump file in the opened directory, picking `<name>.N` when `<name>` exists (a
/// pid reused within one boot's clock tick): the descriptor and the file's absolute path.
fn open_exclusive(
    dir_fd: &std::os::fd::OwnedFd,
    dir: &Path,
    base_name: &str,
) -> Result<(i32, PathBuf), CreateError> {
    for attempt in 0..16u32 {
        let name = if attempt == 0 {
            base_name.to_owned()
        } else {
            format!("{base_name}.{attempt}")
        };
        let path = dir.join(&name);
        match create_in(dir_fd, &name) {
            Ok(fd) => return Ok((fd, path)),
            Err(libc::EEXIST) => continue,
            Err(errno) => {
                return Err(CreateError {
                    step: "open",
                    path,
                    errno,
                    refused: None,
                })
            }
        }
    }
    Err(CreateError {
        step: "open",
        path: dir.join(base_name),
        errno: libc::EEXIST,
        refused: None,
    })
}
