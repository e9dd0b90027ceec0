//! Recording into a ring: the record's fields ([`Entry`]), a thread's handle on its ring
//! ([`RingWriter`]: slot reservation, the commit-word protocol) and a call still in flight
//! ([`PendingCall`]).

use super::anchors::{refresh_anchor, ANCHOR_EVERY_MASK};
use crate::clock;
use ncclshim_format::layout::*;
use ncclshim_format::schema::{CallId, RecordKind, SlotRef};
use std::ptr;
use std::sync::atomic::{fence, Ordering};

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
    pub(super) header: *const FileHeader,
    pub(super) dir: *const RingDirEntry,
    pub(super) slots: *mut Slot,
    pub(super) mask: u64,
    pub(super) ring: u32,
    pub(super) tid: u32,
    pub(super) shared: bool,
}

/// A call recorded at entry whose completion is still to be written.
#[must_use = "complete() the call, or it stays in flight in the dump"]
pub struct PendingCall {
    pub(super) slot: *mut Slot,
    pub(super) commit: u64,
    pub(super) slot_ref: SlotRef,
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

impl RingWriter {
    pub(super) fn dir(&self) -> &RingDirEntry {
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
    pub(super) fn reserve(&self) -> u64 {
        let head = &self.dir().head;
        if self.shared {
            head.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            head.load(Ordering::Relaxed) + 1
        }
    }

    /// Writes one record and returns the slot; `t_exit` is `IN_FLIGHT` or `t_enter`.
    #[inline]
    pub(super) fn write(&self, e: &Entry, in_flight: bool) -> (*mut Slot, u64, SlotRef) {
        let (slot, commit, slot_ref, _) = self.write_at(e, in_flight, None);
        (slot, commit, slot_ref)
    }

    /// As `write`, at time `at` (this process's record time base) instead of a clock read.
    #[inline]
    pub(super) fn write_at(
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
    pub(super) fn owned(&self) -> Option<*mut Slot> {
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
