//! The profiler plugin's running aggregates: the layout of a `BlobKind::ProfAggregates` payload,
//! shared by its one writer (`ncclshim-profiler`'s `agg`, which maps the blob and updates the
//! cells in place) and every reader (`ncclshim dump`, the report's job model). One definition,
//! so a field cannot move on one side only.
//!
//! Layout (little-endian, offsets within the payload):
//!
//! ```text
//! 0   magic "NSHPAGG1"          8   version u32 (1)       12  rows u32 (16: profnames func codes)
//! 16  buckets u32 (24)          20  cell_words u32 (6)    24  min_log2 u32 (10)
//! 28  abi version u32           32  comm_id u64 (v1-v3: 0 until the first Coll/P2p names it)
//! 40  rank i32                  44  nranks i32 (0 = unknown)    48 nnodes i32    52 ctx u32
//! 56  reserved u64
//! 64  cells[rows][buckets], each 6 x u64:
//!     count, bytes, timed_count, timed_bytes, gpu_ns_sum, gpu_ns_max
//! ```
//! Bucket 0 holds messages below 1 KiB (2^min_log2); bucket b >= 1 holds
//! [2^(b+9), 2^(b+10)) bytes; the last bucket also takes everything larger. `count`/`bytes` grow
//! when a Coll/P2p starts; the `timed_*` fields and GPU time grow when its kernel's last channel
//! stops. Every counter only grows, so a copy taken at any moment is a set of values each true at
//! some instant.

use crate::profnames::FUNCS;

pub const MAGIC: [u8; 8] = *b"NSHPAGG1";
pub const VERSION: u32 = 1;
/// One row per `profnames::FUNCS` code.
pub const ROWS: usize = 16;
pub const BUCKETS: usize = 24;
pub const CELL_WORDS: usize = 6;
pub const MIN_LOG2: u32 = 10;
pub const HEADER_BYTES: usize = 64;
pub const PAYLOAD_BYTES: usize = HEADER_BYTES + ROWS * BUCKETS * CELL_WORDS * 8;

/// Byte offsets of the header fields.
pub mod header {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const ROWS: usize = 12;
    pub const BUCKETS: usize = 16;
    pub const CELL_WORDS: usize = 20;
    pub const MIN_LOG2: usize = 24;
    pub const ABI: usize = 28;
    pub const COMM_ID: usize = 32;
    pub const RANK: usize = 40;
    pub const NRANKS: usize = 44;
    pub const NNODES: usize = 48;
    pub const CTX: usize = 52;
}

/// Field indices within a cell.
pub mod cell {
    pub const COUNT: usize = 0;
    pub const BYTES: usize = 1;
    pub const TIMED_COUNT: usize = 2;
    pub const TIMED_BYTES: usize = 3;
    pub const GPU_NS_SUM: usize = 4;
    pub const GPU_NS_MAX: usize = 5;
}

const _: () = assert!(
    FUNCS.len() == ROWS,
    "one aggregate row per profiler func code"
);

/// The size bucket of a message of `bytes` bytes.
#[inline]
pub fn bucket(bytes: u64) -> usize {
    if bytes < 1 << MIN_LOG2 {
        return 0;
    }
    let log2 = 63 - bytes.leading_zeros();
    ((log2 - MIN_LOG2 + 1) as usize).min(BUCKETS - 1)
}

/// Lower bound in bytes of a bucket (0 for bucket 0).
pub fn bucket_floor(b: usize) -> u64 {
    if b == 0 {
        0
    } else {
        1u64 << (b as u32 + MIN_LOG2 - 1)
    }
}

/// The cell index of (func code, bytes).
#[inline]
pub fn cell_index(func: u8, bytes: u64) -> usize {
    usize::from(func).min(ROWS - 1) * BUCKETS + bucket(bytes)
}

/// What the writer puts in a new table's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableHeader {
    pub abi: u32,
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub nnodes: i32,
    pub ctx: u32,
}

/// A new table's payload: the header, every cell zero.
pub fn encode_empty(h: &TableHeader) -> Vec<u8> {
    let mut p = vec![0u8; PAYLOAD_BYTES];
    let mut put = |at: usize, v: &[u8]| p[at..at + v.len()].copy_from_slice(v);
    put(header::MAGIC, &MAGIC);
    put(header::VERSION, &VERSION.to_le_bytes());
    put(header::ROWS, &(ROWS as u32).to_le_bytes());
    put(header::BUCKETS, &(BUCKETS as u32).to_le_bytes());
    put(header::CELL_WORDS, &(CELL_WORDS as u32).to_le_bytes());
    put(header::MIN_LOG2, &MIN_LOG2.to_le_bytes());
    put(header::ABI, &h.abi.to_le_bytes());
    put(header::COMM_ID, &h.comm_id.to_le_bytes());
    put(header::RANK, &h.rank.to_le_bytes());
    put(header::NRANKS, &h.nranks.to_le_bytes());
    put(header::NNODES, &h.nnodes.to_le_bytes());
    put(header::CTX, &h.ctx.to_le_bytes());
    p
}

/// One non-empty cell of a decoded table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellSnapshot {
    /// `profnames::FUNCS` code.
    pub func: u8,
    pub bucket: u8,
    /// Smallest message size in the bucket, in bytes.
    pub bucket_floor: u64,
    pub count: u64,
    pub bytes: u64,
    pub timed_count: u64,
    pub timed_bytes: u64,
    pub gpu_ns_sum: u64,
    pub gpu_ns_max: u64,
}

/// A decoded `ProfAggregates` blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggSnapshot {
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub nnodes: i32,
    pub abi: u32,
    pub ctx: u32,
    pub cells: Vec<CellSnapshot>,
}

/// Totals of one table (or of some of its cells).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "reader", derive(serde::Serialize, serde::Deserialize))]
pub struct AggTotals {
    /// Operations started.
    pub count: u64,
    pub bytes: u64,
    /// Operations whose kernel reported its end, with their bytes and GPU time.
    pub timed_count: u64,
    pub timed_bytes: u64,
    pub gpu_ns_sum: u64,
    pub gpu_ns_max: u64,
}

impl AggTotals {
    /// Adds one cell.
    pub fn add(&mut self, c: &CellSnapshot) {
        self.merge(&AggTotals {
            count: c.count,
            bytes: c.bytes,
            timed_count: c.timed_count,
            timed_bytes: c.timed_bytes,
            gpu_ns_sum: c.gpu_ns_sum,
            gpu_ns_max: c.gpu_ns_max,
        });
    }

    /// Adds other totals (of another cell, table or rank): sums saturate, the maximum is kept.
    pub fn merge(&mut self, o: &AggTotals) {
        self.count = self.count.saturating_add(o.count);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.timed_count = self.timed_count.saturating_add(o.timed_count);
        self.timed_bytes = self.timed_bytes.saturating_add(o.timed_bytes);
        self.gpu_ns_sum = self.gpu_ns_sum.saturating_add(o.gpu_ns_sum);
        self.gpu_ns_max = self.gpu_ns_max.max(o.gpu_ns_max);
    }
}

impl AggSnapshot {
    /// Every cell summed.
    pub fn totals(&self) -> AggTotals {
        let mut t = AggTotals::default();
        self.cells.iter().for_each(|c| t.add(c));
        t
    }
}

/// Decodes a blob payload; `None` when it is not a version-1 table of the expected shape.
/// Never panics on any input.
pub fn decode(p: &[u8]) -> Option<AggSnapshot> {
    let u32_at =
        |o: usize| -> Option<u32> { Some(u32::from_le_bytes(p.get(o..o + 4)?.try_into().ok()?)) };
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_le_bytes(p.get(o..o + 8)?.try_into().ok()?)) };
    if p.get(0..8)? != MAGIC || u32_at(header::VERSION)? != VERSION {
        return None;
    }
    let (rows, buckets, words) = (
        u32_at(header::ROWS)? as usize,
        u32_at(header::BUCKETS)? as usize,
        u32_at(header::CELL_WORDS)? as usize,
    );
    if rows != ROWS
        || buckets != BUCKETS
        || words != CELL_WORDS
        || u32_at(header::MIN_LOG2)? != MIN_LOG2
        || p.len() < PAYLOAD_BYTES
    {
        return None;
    }
    let mut cells = Vec::new();
    for i in 0..rows * buckets {
        let base = HEADER_BYTES + i * CELL_WORDS * 8;
        let w = |k: usize| u64_at(base + 8 * k);
        let count = w(cell::COUNT)?;
        let timed = w(cell::TIMED_COUNT)?;
        if count == 0 && timed == 0 {
            continue;
        }
        let bucket = i % buckets;
        cells.push(CellSnapshot {
            func: (i / buckets) as u8,
            bucket: bucket as u8,
            bucket_floor: bucket_floor(bucket),
            count,
            bytes: w(cell::BYTES)?,
            timed_count: timed,
            timed_bytes: w(cell::TIMED_BYTES)?,
            gpu_ns_sum: w(cell::GPU_NS_SUM)?,
            gpu_ns_max: w(cell::GPU_NS_MAX)?,
        });
    }
    Some(AggSnapshot {
        comm_id: u64_at(header::COMM_ID)?,
        rank: u32_at(header::RANK)? as i32,
        nranks: u32_at(header::NRANKS)? as i32,
        nnodes: u32_at(header::NNODES)? as i32,
        abi: u32_at(header::ABI)?,
        ctx: u32_at(header::CTX)?,
        cells,
    })
}

/// The bus-bandwidth factor of a collective over `nranks` ranks (nccl-tests' PERFORMANCE.md):
/// the algorithm bandwidth (bytes / time) times this is the bandwidth each link sustained, a
/// number comparable across operations and job sizes. AllReduce moves 2(n-1)/n of its data per
/// rank, AllGather and ReduceScatter (n-1)/n, the rooted and point-to-point operations 1.
pub fn bus_factor(func: u8, nranks: u32) -> f64 {
    let n = f64::from(nranks.max(1));
    match FUNCS.get(usize::from(func)).copied() {
        Some("AllReduce") => 2.0 * (n - 1.0) / n,
        Some("AllGather" | "ReduceScatter" | "AlltoAll") => (n - 1.0) / n,
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_from_1kib() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1023), 0);
        assert_eq!(bucket(1024), 1);
        assert_eq!(bucket(2047), 1);
        assert_eq!(bucket(2048), 2);
        assert_eq!(bucket(1 << 20), 11);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        for b in 1..BUCKETS {
            assert_eq!(bucket(bucket_floor(b)), b);
            assert_eq!(bucket(bucket_floor(b) - 1), b - 1);
        }
    }

    #[test]
    fn an_encoded_table_decodes_to_its_header_and_cells() {
        let h = TableHeader {
            abi: 5,
            comm_id: 0xfeed,
            rank: 3,
            nranks: 8,
            nnodes: 2,
            ctx: 1,
        };
        let mut p = encode_empty(&h);
        let i = cell_index(2, 4096);
        for (k, v) in [10u64, 40960, 9, 36864, 900, 200].iter().enumerate() {
            let at = HEADER_BYTES + (i * CELL_WORDS + k) * 8;
            p[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        let s = decode(&p).expect("decodes");
        assert_eq!(
            (s.comm_id, s.rank, s.nranks, s.nnodes, s.abi, s.ctx),
            (0xfeed, 3, 8, 2, 5, 1)
        );
        assert_eq!(s.cells.len(), 1);
        let t = s.totals();
        assert_eq!(
            (t.count, t.bytes, t.timed_count, t.gpu_ns_sum, t.gpu_ns_max),
            (10, 40960, 9, 900, 200)
        );
        assert_eq!(s.cells[0].func, 2);
        assert_eq!(s.cells[0].bucket_floor, 4096);
    }

    #[test]
    fn anything_else_is_refused_without_panicking() {
        let good = encode_empty(&TableHeader::default());
        assert!(decode(&good).is_some());
        for n in [0, 7, 8, 63, 64, PAYLOAD_BYTES - 1] {
            assert!(decode(&good[..n]).is_none(), "truncated to {n}");
        }
        let mut other = good.clone();
        other[header::BUCKETS] = 25;
        assert!(decode(&other).is_none());
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(bus_factor(2, 4), 1.5);
        assert_eq!(bus_factor(1, 4), 0.75);
        assert_eq!(bus_factor(4, 4), 1.0);
    }
}
