//! Per-thread call state shared by the NCCL and driver wrappers, in one thread-local so the hot
//! path pays for one TLS lookup: how many real NCCL calls this thread is inside (NCCL calls its
//! own API through the PLT, and driver calls made from inside NCCL are "nested"), the user's
//! `ncclGroupStart` depth, and which NCCL library slot the current call forwards to.

use ncclshim_dump::schema::slot_flags;
use std::cell::Cell;

struct ThreadState {
    /// How many real NCCL calls this thread is inside (NCCL calls its own API through the PLT).
    in_nccl: Cell<u32>,
    /// User-level ncclGroupStart depth on this thread.
    group: Cell<u32>,
    /// Library slot (`nccl::libs`) the current export call forwards to; 0: the resolver's.
    lib: Cell<u8>,
    /// Set by a bound stub just before it jumps to an export; taken by that export's boundary.
    next_lib: Cell<u8>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            in_nccl: Cell::new(0),
            group: Cell::new(0),
            lib: Cell::new(0),
            next_lib: Cell::new(0),
        }
    };
}

/// Whether this call comes from inside another NCCL call on this thread.
#[inline]
pub fn nested() -> bool {
    STATE.try_with(|s| s.in_nccl.get() > 0).unwrap_or(false)
}

pub fn group_depth() -> u32 {
    STATE.try_with(|s| s.group.get()).unwrap_or(0)
}

pub fn set_group_depth(v: u32) {
    let _ = STATE.try_with(|s| s.group.set(v));
}

/// The library slot this thread's current NCCL call forwards to (0 outside bound calls).
#[inline]
pub fn current_lib() -> usize {
    STATE.try_with(|s| usize::from(s.lib.get())).unwrap_or(0)
}

/// Makes `k` the library slot of this thread's current call; returns the previous one.
#[inline]
pub fn replace_lib(k: u8) -> u8 {
    STATE.try_with(|s| s.lib.replace(k)).unwrap_or(0)
}

/// Restores the library slot [`replace_lib`] returned.
#[inline]
pub fn restore_lib(k: u8) {
    let _ = STATE.try_with(|s| s.lib.set(k));
}

/// Marks the next export call on this thread as one for library slot `k` (a bound stub).
pub fn set_next_lib(k: u8) {
    let _ = STATE.try_with(|s| s.next_lib.set(k));
}

/// Takes the mark a bound stub left for this call (0: none).
#[inline]
pub fn take_next_lib() -> u8 {
    STATE
        .try_with(|s| {
            let k = s.next_lib.get();
            if k != 0 {
                s.next_lib.set(0);
            }
            k
        })
        .unwrap_or(0)
}

/// Runs the real call with this thread marked as inside NCCL.
#[inline]
pub fn forward<R>(f: impl FnOnce() -> R) -> R {
    let _ = STATE.try_with(|s| s.in_nccl.set(s.in_nccl.get() + 1));
    let r = f();
    let _ = STATE.try_with(|s| s.in_nccl.set(s.in_nccl.get().saturating_sub(1)));
    r
}

/// The slot flags every record of this call carries.
#[inline]
pub fn context_flags() -> u32 {
    STATE
        .try_with(|s| {
            let mut f = 0;
            if s.in_nccl.get() > 0 {
                f |= slot_flags::NESTED;
            }
            if s.group.get() > 0 {
                f |= slot_flags::IN_GROUP;
            }
            f
        })
        .unwrap_or(0)
}
