//! Per-communicator state the wrappers keep without allocating or locking on the record path:
//! the collective sequence number, NCCL's per-(comm, op) counter, the last async error seen,
//! and the join facts (hash, rank, size) of a comm whose non-blocking init is still running.
//!
//! A fixed open-addressing table keyed by the comm pointer. Entries are claimed with one CAS and
//! released (tombstoned) when the comm is destroyed or aborted; a comm that finds the table full
//! is simply not counted (its `seq` args read 0 and the miss is visible as `seq == op_seq == 0`).

use crate::nccl::ffi::NcclComm;
use ncclshim_dump::layout::CommTableEntry;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

const CAPACITY: usize = 1024;
const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;
/// Ops counted separately, indexed by `CallId - NcclAllReduce` (AllReduce … Recv).
pub const OPS: usize = 11;
/// `last_async` before the first poll.
const NO_ASYNC: i32 = i32::MIN;

pub struct CommEntry {
    key: AtomicU64,
    pub seq: AtomicU64,
    pub op_seq: [AtomicU64; OPS],
    pub last_async: AtomicI32,
    pub comm_hash: AtomicU64,
    pub uid_hash: AtomicU64,
    pub nranks: AtomicI32,
    pub rank: AtomicI32,
    /// Splits made from this comm so far (feeds the child's commHash).
    pub children: AtomicU32,
    /// 1 while a non-blocking init has not yet reported success through GetAsyncError.
    pub pending_init: AtomicU32,
    /// The comm's entry in the dump's communicator table (null: none, the table was full or
    /// recording is off).
    table: AtomicPtr<CommTableEntry>,
}

#[allow(clippy::declare_interior_mutable_const)]
const ENTRY: CommEntry = CommEntry {
    key: AtomicU64::new(EMPTY),
    seq: AtomicU64::new(0),
    op_seq: [const { AtomicU64::new(0) }; OPS],
    last_async: AtomicI32::new(NO_ASYNC),
    comm_hash: AtomicU64::new(0),
    uid_hash: AtomicU64::new(0),
    nranks: AtomicI32::new(0),
    rank: AtomicI32::new(-1),
    children: AtomicU32::new(0),
    pending_init: AtomicU32::new(0),
    table: AtomicPtr::new(std::ptr::null_mut()),
};

static TABLE: [CommEntry; CAPACITY] = [ENTRY; CAPACITY];

#[inline]
fn start(key: u64) -> usize {
    // Comm pointers are heap addresses: mix the bits so neighbours spread out.
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % CAPACITY
}

/// The entry of a known comm.
#[inline]
pub fn find(comm: NcclComm) -> Option<&'static CommEntry> {
    let key = comm as u64;
    if key == EMPTY || key == TOMBSTONE {
        return None;
    }
    let s = start(key);
    for i in 0..CAPACITY {
        let e = &TABLE[(s + i) % CAPACITY];
        match e.key.load(Ordering::Acquire) {
            k if k == key => return Some(e),
            EMPTY => return None,
            _ => {}
        }
    }
    None
}

/// The entry of `comm`, claimed if new. A freshly created comm calls `reset` on it.
pub fn get_or_insert(comm: NcclComm) -> Option<&'static CommEntry> {
    if let Some(e) = find(comm) {
        return Some(e);
    }
    let key = comm as u64;
    if key == EMPTY || key == TOMBSTONE {
        return None;
    }
    let s = start(key);
    for i in 0..CAPACITY {
        let e = &TABLE[(s + i) % CAPACITY];
        let cur = e.key.load(Ordering::Acquire);
        if cur == key {
            return Some(e);
        }
        if (cur == EMPTY || cur == TOMBSTONE)
            && e.key
                .compare_exchange(cur, key, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            e.reset();
            return Some(e);
        }
    }
    None
}

/// Forgets a destroyed comm (its address may be reused by the next one).
pub fn remove(comm: NcclComm) {
    if let Some(e) = find(comm) {
        e.key.store(TOMBSTONE, Ordering::Release);
    }
}

impl CommEntry {
    pub fn reset(&self) {
        self.seq.store(0, Ordering::Relaxed);
        for c in &self.op_seq {
            c.store(0, Ordering::Relaxed);
        }
        self.last_async.store(NO_ASYNC, Ordering::Relaxed);
        self.comm_hash.store(0, Ordering::Relaxed);
        self.uid_hash.store(0, Ordering::Relaxed);
        self.nranks.store(0, Ordering::Relaxed);
        self.rank.store(-1, Ordering::Relaxed);
        self.children.store(0, Ordering::Relaxed);
        self.pending_init.store(0, Ordering::Relaxed);
        self.table.store(std::ptr::null_mut(), Ordering::Relaxed);
    }

    /// The comm's entry in the dump's communicator table.
    #[inline]
    pub fn table(&self) -> Option<&'static CommTableEntry> {
        // SAFETY: only pointers into the never-unmapped dump mapping are stored (`set_table`).
        unsafe { self.table.load(Ordering::Acquire).as_ref() }
    }

    pub fn set_table(&self, t: &'static CommTableEntry) {
        self.table
            .store((t as *const CommTableEntry).cast_mut(), Ordering::Release);
    }

    /// Takes the next (seq, op_seq) pair for operation `op` (both count from 0).
    #[inline]
    pub fn next_seq(&self, op: usize) -> (u64, u64) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let op_seq = self
            .op_seq
            .get(op)
            .map_or(0, |c| c.fetch_add(1, Ordering::Relaxed));
        (seq, op_seq)
    }

    /// Stores the async error just polled; returns the previous one when it differs
    /// (`i32::MIN` for "never polled"), `None` when unchanged.
    #[inline]
    pub fn async_changed(&self, now: i32) -> Option<i32> {
        let prev = self.last_async.swap(now, Ordering::Relaxed);
        (prev != now).then_some(prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: usize) -> NcclComm {
        v as NcclComm
    }

    #[test]
    fn counters_are_per_comm_and_per_op() {
        let a = get_or_insert(c(0x1000)).unwrap();
        let b = get_or_insert(c(0x2000)).unwrap();
        assert_eq!(a.next_seq(0), (0, 0));
        assert_eq!(a.next_seq(0), (1, 1));
        assert_eq!(a.next_seq(4), (2, 0));
        assert_eq!(b.next_seq(0), (0, 0));
        assert!(std::ptr::eq(find(c(0x1000)).unwrap(), a));
        remove(c(0x1000));
        assert!(find(c(0x1000)).is_none());
        // Address reuse starts from zero again.
        let a2 = get_or_insert(c(0x1000)).unwrap();
        assert_eq!(a2.next_seq(0), (0, 0));
        assert!(find(c(0)).is_none());
    }

    #[test]
    fn async_error_changes_only() {
        let e = get_or_insert(c(0x3000)).unwrap();
        assert_eq!(e.async_changed(7), Some(NO_ASYNC));
        assert_eq!(e.async_changed(7), None);
        assert_eq!(e.async_changed(0), Some(7));
        assert_eq!(e.async_changed(0), None);
    }

    #[test]
    fn colliding_keys_probe_onwards() {
        // Fill many entries whose start index may collide; every one stays findable.
        let keys: Vec<usize> = (1..200).map(|i| 0x7000_0000 + i * CAPACITY * 64).collect();
        for &k in &keys {
            get_or_insert(c(k)).unwrap().next_seq(1);
        }
        for &k in &keys {
            assert_eq!(find(c(k)).unwrap().op_seq[1].load(Ordering::Relaxed), 1);
        }
    }
}
