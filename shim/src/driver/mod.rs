//! CUDA driver interposition: how NCCL's cuMem / multicast / legacy IPC driver calls get
//! recorded although NCCL only ever reaches them through function pointers.
//!
//! NCCL's static cudart (and NCCL ≤ 2.20 itself) does `dlopen("libcuda.so.1")` and one
//! `dlsym(h, "cuGetProcAddress[_v2]")`, then asks that function for `cuGetProcAddress` again
//! and makes every further lookup through the answer. So: [`dlsym`] (a naked tail-jump
//! trampoline that keeps `RTLD_NEXT` right for everyone else) hands out our wrapper for
//! `cuGetProcAddress[_v2]` and for watched `cu*` names asked for directly (the DOCA path);
//! [`gpa`] wraps the lookups, including the self-lookup; [`calls`] records the watched calls
//! with their arguments, CUresult, caller and device identity ([`device`]). Nothing here
//! initializes CUDA or changes what the driver returns, and a process that never loads libcuda
//! pays one two-byte compare per `dlsym`.
//!
//! Lookups are counted in process-wide atomics and flushed into the dump header
//! (`SHIM_DRIVER_LOOKUPS` / `SHIM_DRIVER_WRAPPED`) only once a dump exists: a lookup alone
//! never creates the file.
//!
//! x86_64 Linux only (the trampoline and the caller-capturing stubs are x86_64 assembly);
//! elsewhere nothing is interposed and driver calls are simply not recorded.

// Elsewhere the counters and slot table have no users.
#![cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]

pub mod cuda;
pub mod watch;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod calls;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod device;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod dlsym;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod errtext;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod gpa;

use ncclshim_dump::layout::counters;
use ncclshim_dump::Recorder;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lookups / wrapped lookups since the process started (never reset).
static LOOKUPS: AtomicU64 = AtomicU64::new(0);
static WRAPPED: AtomicU64 = AtomicU64::new(0);
/// Not yet added to a dump header.
static LOOKUPS_PENDING: AtomicU64 = AtomicU64::new(0);
static WRAPPED_PENDING: AtomicU64 = AtomicU64::new(0);

/// Driver lookups that went through the hooks, and how many of them were answered with a
/// recording wrapper, since the process started.
pub fn lookup_counts() -> (u64, u64) {
    (
        LOOKUPS.load(Ordering::Relaxed),
        WRAPPED.load(Ordering::Relaxed),
    )
}

#[inline]
fn count_lookup() {
    LOOKUPS.fetch_add(1, Ordering::Relaxed);
    LOOKUPS_PENDING.fetch_add(1, Ordering::Relaxed);
    flush_if_recording();
}

#[inline]
fn count_wrapped() {
    WRAPPED.fetch_add(1, Ordering::Relaxed);
    WRAPPED_PENDING.fetch_add(1, Ordering::Relaxed);
    flush_if_recording();
}

#[inline]
fn flush_if_recording() {
    if let Some(rec) = crate::recorder::SHIM.existing() {
        flush_counters(rec);
    }
}

/// Adds the lookups counted so far to `rec`'s header. Also meant for the recorder's creation
/// hook, so counts from before the first event land in the file at once.
#[inline]
pub fn flush_counters(rec: &Recorder) {
    // Plain loads first: every recorded driver call comes here, and the pending counts are
    // almost always zero by then; a locked swap each time would cost more than the record.
    for (pending, index) in [
        (&LOOKUPS_PENDING, counters::SHIM_DRIVER_LOOKUPS),
        (&WRAPPED_PENDING, counters::SHIM_DRIVER_WRAPPED),
    ] {
        if pending.load(Ordering::Relaxed) != 0 {
            let n = pending.swap(0, Ordering::Relaxed);
            rec.add_counter(index, n);
        }
    }
}

/// Called when the shim's dump is created: flushes the lookup counts.
pub fn on_recorder_created(rec: &'static Recorder) {
    flush_counters(rec);
}

/// Wrapper copy `s` of watched ABI `w` (see `watch`), as the pointer handed to the host.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn wrapper(w: watch::W, s: usize) -> *mut std::ffi::c_void {
    use watch::W;
    macro_rules! pick {
        ($m:ident :: $f:ident) => {
            match s {
                0 => $m::$f::<0> as *const () as usize,
                1 => $m::$f::<1> as *const () as usize,
                2 => $m::$f::<2> as *const () as usize,
                3 => $m::$f::<3> as *const () as usize,
                4 => $m::$f::<4> as *const () as usize,
                5 => $m::$f::<5> as *const () as usize,
                6 => $m::$f::<6> as *const () as usize,
                7 => $m::$f::<7> as *const () as usize,
                _ => 0,
            }
        };
    }
    const _: () = assert!(watch::SLOTS == 8, "pick! lists one arm per slot");
    let p = match w {
        W::GpaV1 => pick!(gpa::gpa_v1),
        W::GpaV2 => pick!(gpa::gpa_v2),
        W::MemExport => pick!(calls::mem_export),
        W::MemImport => pick!(calls::mem_import),
        W::MemCreate => pick!(calls::mem_create),
        W::MemRelease => pick!(calls::mem_release),
        W::MemMap => pick!(calls::mem_map),
        W::MemUnmap => pick!(calls::mem_unmap),
        W::MemSetAccess => pick!(calls::mem_set_access),
        W::MemAddressReserve => pick!(calls::mem_address_reserve),
        W::MemAddressFree => pick!(calls::mem_address_free),
        W::MemRetain => pick!(calls::mem_retain),
        W::MemGetHandleForRange => pick!(calls::mem_get_handle_for_range),
        W::McCreate => pick!(calls::mc_create),
        W::McAddDevice => pick!(calls::mc_add_device),
        W::McBindMem => pick!(calls::mc_bind_mem),
        W::McBindAddr => pick!(calls::mc_bind_addr),
        W::McUnbind => pick!(calls::mc_unbind),
        W::IpcGet => pick!(calls::ipc_get),
        W::IpcOpenV1 => pick!(calls::ipc_open_v1),
        W::IpcOpenV2 => pick!(calls::ipc_open_v2),
        W::IpcClose => pick!(calls::ipc_close),
    };
    p as *mut std::ffi::c_void
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_wrapper_copy_is_distinct() {
        let mut seen = HashSet::new();
        for &w in watch::W::ALL {
            for s in 0..watch::SLOTS {
                let p = wrapper(w, s);
                assert!(!p.is_null());
                assert!(seen.insert(p as usize), "{w:?}/{s} shares a pointer");
            }
        }
    }

    #[test]
    fn claim_reuses_a_copy_per_pointer_and_refuses_our_own() {
        use watch::{claim, real, W};
        let a = 0x1000 as *mut std::ffi::c_void;
        let b = 0x2000 as *mut std::ffi::c_void;
        let wa = claim(W::McUnbind, a, wrapper).unwrap();
        assert_eq!(claim(W::McUnbind, a, wrapper), Some(wa));
        let wb = claim(W::McUnbind, b, wrapper).unwrap();
        assert_ne!(wa, wb);
        assert_eq!(real(W::McUnbind, 0), a);
        assert_eq!(real(W::McUnbind, 1), b);
        // A wrapper looked up again through a wrapped cuGetProcAddress is not wrapped twice.
        assert_eq!(claim(W::McUnbind, wa, wrapper), None);
        for i in 2..watch::SLOTS {
            assert!(claim(W::McUnbind, (0x3000 + i * 16) as *mut _, wrapper).is_some());
        }
        // All copies taken by other pointers: pass through.
        assert_eq!(claim(W::McUnbind, 0x9000 as *mut _, wrapper), None);
        assert_eq!(claim(W::McUnbind, std::ptr::null_mut(), wrapper), None);
    }
}
