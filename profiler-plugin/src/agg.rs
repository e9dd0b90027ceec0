//! Running aggregates per communicator, operation and message-size bucket, kept in the dump
//! itself so they are readable at any time (live, or after a crash) and never wrap.
//!
//! At `init` the plugin appends one `BlobKind::ProfAggregates` blob per communicator to the
//! dump's arena and then updates it **in place** (atomic 64-bit stores; each field has a single
//! writer, see `add_op`/`add_timed`), through a second shared mapping of the same file pages. Every counter is a monotonically growing `u64`, so a reader
//! copying the blob at any moment sees values that were each true at some instant (counters of
//! one cell may be one collective apart). The layout (header, cells, size buckets) is defined
//! once in `ncclshim_format::aggregates`, shared with every reader; this module is the writer.
//! `count`/`bytes` grow when a Coll/P2p starts; the `timed_*` fields and GPU time grow when the
//! last of its `nChannels` KernelCh events reports its stop time: the collective's GPU time is
//! max(channel stop) - min(channel start) in %globaltimer ns. Bus bandwidth for a cell is
//! `timed_bytes * factor(op, nranks) / gpu_ns_sum`.

use ncclshim_dump::layout::BLOB_HEADER_SIZE;
use ncclshim_dump::{BlobKind, Recorder};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use ncclshim_format::aggregates::{
    bucket, bucket_floor, cell, cell_index, decode, AggSnapshot, CellSnapshot, BUCKETS, CELL_WORDS,
    HEADER_BYTES, MAGIC, MIN_LOG2, PAYLOAD_BYTES, ROWS, VERSION,
};
use ncclshim_format::aggregates::{encode_empty, TableHeader};

/// The mapped blob payload. Lives in a `MAP_SHARED` mapping that is never unmapped.
#[repr(C)]
pub struct AggTable {
    pub magic: [u8; 8],
    pub version: u32,
    pub rows: u32,
    pub buckets: u32,
    pub cell_words: u32,
    pub min_log2: u32,
    pub abi: u32,
    pub comm_id: AtomicU64,
    pub rank: AtomicU32,
    pub nranks: AtomicU32,
    pub nnodes: u32,
    pub ctx: u32,
    pub _reserved: u64,
    pub cells: [[AtomicU64; CELL_WORDS]; ROWS * BUCKETS],
}

impl AggTable {
    #[inline]
    pub fn cell(&self, index: usize) -> Option<&[AtomicU64; CELL_WORDS]> {
        self.cells.get(index)
    }

    /// A Coll/P2p started: one more operation of `bytes` bytes. NCCL starts a communicator's
    /// Coll/P2p events in stream order (from the user thread, or from the CUDA host-callback
    /// thread when earlier host work is pending), never two at once, so the cell has one writer
    /// at a time: plain loads and stores, no locked read-modify-write.
    #[inline]
    pub fn add_op(&self, index: usize, bytes: u64) {
        if let Some(c) = self.cell(index) {
            bump(&c[cell::COUNT], 1);
            bump(&c[cell::BYTES], bytes);
        }
    }

    /// An operation's last channel stopped on the GPU. Only the proxy progress thread of the
    /// communicator reports kernel stops (nccl-facts §1.10), so these fields have one writer:
    /// plain atomic loads and stores, no read-modify-write.
    #[inline]
    pub fn add_timed(&self, index: usize, bytes: u64, gpu_ns: u64) {
        if let Some(c) = self.cell(index) {
            let bump = |w: &AtomicU64, by: u64| {
                w.store(
                    w.load(Ordering::Relaxed).wrapping_add(by),
                    Ordering::Relaxed,
                )
            };
            bump(&c[cell::TIMED_COUNT], 1);
            bump(&c[cell::TIMED_BYTES], bytes);
            bump(&c[cell::GPU_NS_SUM], gpu_ns);
            if gpu_ns > c[cell::GPU_NS_MAX].load(Ordering::Relaxed) {
                c[cell::GPU_NS_MAX].store(gpu_ns, Ordering::Relaxed);
            }
        }
    }

    /// Total operations counted so far (for the finalize record).
    pub fn total_count(&self) -> u64 {
        self.cells
            .iter()
            .map(|c| c[cell::COUNT].load(Ordering::Relaxed))
            .sum()
    }
}

/// Adds to a counter that has a single writer (see the callers).
#[inline]
fn bump(w: &AtomicU64, by: u64) {
    w.store(
        w.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Appends a communicator's table (its `header`: the communicator's identity and context
/// index, as init knew them) to the arena and maps it for in-place updates. Rare path
/// (init): allocation and syscalls are fine here. `None` when the arena is full or the
/// mapping fails; the records still carry everything, only the running totals are missing.
pub fn create(rec: &'static Recorder, header: &TableHeader) -> Option<(&'static AggTable, u64)> {
    let payload = encode_empty(header);
    let offset = rec.append_blob(BlobKind::ProfAggregates, &payload);
    if offset == 0 {
        return None;
    }
    let table = map_payload(rec, offset + BLOB_HEADER_SIZE as u64)?;
    Some((table, offset))
}

fn map_payload(rec: &Recorder, payload_offset: u64) -> Option<&'static AggTable> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let start = payload_offset / page * page;
    let len = (payload_offset - start) as usize + PAYLOAD_BYTES;
    let path = CString::new(rec.path().as_os_str().as_bytes()).ok()?;
    // SAFETY: path is a valid C string; the dump file exists (the recorder created it).
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: mapping a range inside the file (the arena was allocated with posix_fallocate and
    // the blob lies inside it); MAP_SHARED so our stores land in the same pages as the
    // recorder's own mapping. The mapping is never unmapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            start as libc::off_t,
        )
    };
    // SAFETY: fd is open and closed once; the mapping keeps the file.
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the payload starts 8-byte aligned (blob headers are 16 bytes, blobs 8-aligned),
    // spans PAYLOAD_BYTES == size_of::<AggTable>() inside the mapping, was fully initialized by
    // append_blob, and every field we mutate afterwards is an atomic.
    Some(unsafe {
        &*p.cast::<u8>()
            .add((payload_offset - start) as usize)
            .cast::<AggTable>()
    })
}

// ---- in-flight operations: per-collective GPU time across channels ----

/// One Coll/P2p between its start and the stop of its last KernelCh. One cache line each: an
/// entry never shares a line with its neighbour (written by another thread's operation), and
/// its address is a shift of its index.
#[repr(C, align(64))]
pub struct Inflight {
    /// Record reference (`Handle::record_ref`) of the owning Coll/P2p start; 0 = free.
    pub tag: AtomicU64,
    /// ctx index | cell index << 16 | expected channels << 32 | event type bit index << 40.
    pub meta: AtomicU64,
    pub bytes: AtomicU64,
    pub start_min: AtomicU64,
    pub stop_max: AtomicU64,
    pub stopped: AtomicU32,
    /// Record time of the operation's start record.
    pub t_start: AtomicU64,
}

pub const INFLIGHT: usize = 1024;

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Inflight = Inflight {
    tag: AtomicU64::new(0),
    meta: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    start_min: AtomicU64::new(u64::MAX),
    stop_max: AtomicU64::new(0),
    stopped: AtomicU32::new(0),
    t_start: AtomicU64::new(0),
};

static TABLE: [Inflight; INFLIGHT] = [FREE; INFLIGHT];
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Claims an entry for an operation that just started. Entries are reused round-robin: an
/// operation still waiting for its kernel after 1023 newer ones loses its GPU time (its
/// records keep it).
#[inline]
pub fn claim(op: InflightOp) -> u16 {
    let i = reserve();
    fill(i, op);
    i
}

/// The next entry, round-robin. The hot path reserves it before it writes the operation's
/// record: a locked read-modify-write waits until every earlier store has left the store
/// buffer, and right after the record's 128-byte slot write that wait is long.
#[inline(always)]
pub fn reserve() -> u16 {
    (NEXT.fetch_add(1, Ordering::Relaxed) % INFLIGHT as u64) as u16
}

/// Fills entry `i` (from [`reserve`]) for an operation that just started.
#[inline(always)]
pub fn fill(i: u16, op: InflightOp) {
    let InflightOp {
        tag,
        op_type,
        ctx_index,
        cell,
        bytes,
        channels,
        t_start,
    } = op;
    let Some(e) = TABLE.get(usize::from(i)) else {
        return;
    };
    e.tag.store(0, Ordering::Relaxed);
    e.meta.store(
        u64::from(ctx_index)
            | (cell as u64) << 16
            | u64::from(channels.max(1)) << 32
            | u64::from(op_type & 0xf) << 40,
        Ordering::Relaxed,
    );
    e.bytes.store(bytes, Ordering::Relaxed);
    e.start_min.store(u64::MAX, Ordering::Relaxed);
    e.stop_max.store(0, Ordering::Relaxed);
    e.stopped.store(0, Ordering::Relaxed);
    e.t_start.store(t_start, Ordering::Relaxed);
    e.tag.store(tag, Ordering::Release);
}

/// What [`claim`] records about an operation that just started.
#[derive(Debug, Clone, Copy)]
pub struct InflightOp {
    /// Record reference of its start record.
    pub tag: u64,
    /// Event type bit index (Coll or P2p).
    pub op_type: u8,
    pub ctx_index: u32,
    pub cell: usize,
    pub bytes: u64,
    pub channels: u8,
    /// Record time of its start record.
    pub t_start: u64,
}

/// The entry `i` if it still belongs to the operation `tag`.
#[inline]
pub fn owned_by(i: u16, tag: u64) -> Option<&'static Inflight> {
    let e = TABLE.get(usize::from(i))?;
    (e.tag.load(Ordering::Acquire) == tag).then_some(e)
}

/// The entry `i` while it belongs to some operation. For a per-channel KernelCh handle, which
/// names its own record rather than its parent's, so the tag cannot be checked.
#[inline]
pub fn entry(i: u16) -> Option<&'static Inflight> {
    TABLE
        .get(usize::from(i))
        .filter(|e| e.tag.load(Ordering::Acquire) != 0)
}

impl Inflight {
    pub fn ctx_index(&self) -> u32 {
        (self.meta.load(Ordering::Relaxed) & 0xffff) as u32
    }

    /// A channel started on the GPU at `t`. KernelCh events of one operation all come from the
    /// communicator's proxy progress thread, so min/max/count below have a single writer and
    /// use plain loads and stores (the tag protocol orders them after `claim`).
    #[inline]
    pub fn channel_start(&self, t: u64) {
        if t < self.start_min.load(Ordering::Relaxed) {
            self.start_min.store(t, Ordering::Relaxed);
        }
    }

    /// A channel stopped at `t`. Returns the operation's GPU span when it was the last.
    #[inline]
    pub fn channel_stop(&self, t: u64) -> Option<GpuDone> {
        if t > self.stop_max.load(Ordering::Relaxed) {
            self.stop_max.store(t, Ordering::Relaxed);
        }
        let meta = self.meta.load(Ordering::Relaxed);
        let expected = ((meta >> 32) & 0xff) as u32;
        // Runs before any panic guard (record_state's summarized-channel path): no overflow check.
        let done = self.stopped.load(Ordering::Relaxed).wrapping_add(1);
        self.stopped.store(done, Ordering::Relaxed);
        if done != expected || self.tag.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.tag.store(0, Ordering::Release);
        let gpu_start = self.start_min.load(Ordering::Relaxed);
        let gpu_stop = self.stop_max.load(Ordering::Relaxed);
        (gpu_start != u64::MAX && gpu_stop >= gpu_start).then(|| GpuDone {
            ctx_index: (meta & 0xffff) as u32,
            cell: ((meta >> 16) & 0xffff) as usize,
            bytes: self.bytes.load(Ordering::Relaxed),
            gpu_start,
            gpu_stop,
            channels: expected,
            op_type: ((meta >> 40) & 0xf) as u8,
            t_start: self.t_start.load(Ordering::Relaxed),
        })
    }
}

/// An operation whose last kernel channel reported its stop: its GPU span, in %globaltimer ns,
/// from the earliest channel start to the latest channel stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuDone {
    pub ctx_index: u32,
    pub cell: usize,
    pub bytes: u64,
    pub gpu_start: u64,
    pub gpu_stop: u64,
    pub channels: u32,
    /// Event type bit index of the operation (Coll or P2p).
    pub op_type: u8,
    /// Record time of the operation's start record.
    pub t_start: u64,
}

impl GpuDone {
    pub fn gpu_ns(&self) -> u64 {
        self.gpu_stop.saturating_sub(self.gpu_start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ncclshim_format::aggregates::header;
    use std::mem::{offset_of, size_of};

    #[test]
    fn table_layout_is_pinned() {
        assert_eq!(size_of::<AggTable>(), PAYLOAD_BYTES);
        // The mapped struct and the shared layout name the same bytes.
        assert_eq!(offset_of!(AggTable, magic), header::MAGIC);
        assert_eq!(offset_of!(AggTable, version), header::VERSION);
        assert_eq!(offset_of!(AggTable, rows), header::ROWS);
        assert_eq!(offset_of!(AggTable, buckets), header::BUCKETS);
        assert_eq!(offset_of!(AggTable, cell_words), header::CELL_WORDS);
        assert_eq!(offset_of!(AggTable, min_log2), header::MIN_LOG2);
        assert_eq!(offset_of!(AggTable, abi), header::ABI);
        assert_eq!(offset_of!(AggTable, comm_id), header::COMM_ID);
        assert_eq!(offset_of!(AggTable, rank), header::RANK);
        assert_eq!(offset_of!(AggTable, nranks), header::NRANKS);
        assert_eq!(offset_of!(AggTable, nnodes), header::NNODES);
        assert_eq!(offset_of!(AggTable, ctx), header::CTX);
        assert_eq!(offset_of!(AggTable, cells), HEADER_BYTES);
    }

    #[test]
    fn inflight_completes_on_the_last_channel_with_max_minus_min() {
        let tag = 0xabc0_0000_0001;
        let i = claim(InflightOp {
            tag,
            op_type: 1,
            ctx_index: 3,
            cell: cell_index(2, 4096),
            bytes: 4096,
            channels: 2,
            t_start: 77,
        });
        let e = owned_by(i, tag).expect("just claimed");
        assert_eq!(e.ctx_index(), 3);
        e.channel_start(1_000);
        e.channel_start(900);
        assert_eq!(e.channel_stop(1_500), None);
        let done = e.channel_stop(1_400).expect("last of two channels");
        assert_eq!(
            done,
            GpuDone {
                ctx_index: 3,
                cell: cell_index(2, 4096),
                bytes: 4096,
                gpu_start: 900,
                gpu_stop: 1_500,
                channels: 2,
                op_type: 1,
                t_start: 77,
            }
        );
        assert_eq!(done.gpu_ns(), 600);
        assert!(owned_by(i, tag).is_none(), "freed once complete");
    }
}
