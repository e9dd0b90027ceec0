//! The teardown family of exports: finalize, destroy, abort, revoke, and the async-error poll
//! (which also completes a non-blocking init). See `super` for what every export does.

#![allow(clippy::missing_safety_doc)] // C callers: the contract is NCCL's own (nccl.h).

use super::created::*;
use super::shape::{export, recorded, s};
use crate::nccl::call::{self, boundary, forward, missing};
use crate::nccl::comms;
use crate::nccl::ffi::*;
use crate::nccl::resolve::real;
use crate::runtime::recorder::{record_keep, SHIM};
use ncclshim_dump::layout::counters;
use ncclshim_dump::schema::{args, ArgView};
use ncclshim_dump::{BlobKind, CallId, CommEntryWriter, Entry, RecordKind};
use std::ffi::c_int;
use std::sync::atomic::Ordering;

// ---------------------------------------------------------------- teardown

macro_rules! comm_only {
    ($(#[$m:meta])* $fn_name:ident, $name:literal, $call:expr, forget = $forget:expr) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name(comm: NcclComm) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn(NcclComm) -> NcclResult;
                let real = real!($name, F);
                let entry = || args::NoArgs {}.to_args();
                let rc = recorded(out, real, $call, comm, entry, |f| f(comm), |_| {});
                if $forget && rc == NCCL_SUCCESS {
                    if let Some(t) = comms::find(comm).and_then(|e| e.table()) {
                        t.end($call == CallId::NcclCommAbort);
                    }
                    comms::remove(comm);
                }
            })
        }
    };
}

comm_only!(
    ncclCommFinalize,
    "ncclCommFinalize",
    CallId::NcclCommFinalize,
    forget = false
);
comm_only!(
    ncclCommDestroy,
    "ncclCommDestroy",
    CallId::NcclCommDestroy,
    forget = true
);
comm_only!(
    ncclCommAbort,
    "ncclCommAbort",
    CallId::NcclCommAbort,
    forget = true
);

export!(ncclCommRevoke, "ncclCommRevoke", CallId::NcclCommRevoke,
    (comm: NcclComm, flags: c_int),
    comm = comm, args = args::NcclCommRevoke { flags: s(flags) });

/// Polled constantly by framework watchdogs: recorded only when the value (or rc) changes per
/// comm; unchanged polls only bump a header counter.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: NcclComm,
    async_error: *mut NcclResult,
) -> NcclResult {
    boundary(|out| {
        type F = unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult;
        let Some(f) = real!("ncclCommGetAsyncError", F) else {
            *out = Some(missing(CallId::NcclCommGetAsyncError));
            return;
        };
        let rc = forward(|| f(comm, async_error));
        *out = Some(rc);
        let value = if rc == NCCL_SUCCESS && !async_error.is_null() {
            *async_error
        } else {
            rc
        };
        let entry = comms::get_or_insert(comm);
        let changed = match entry {
            Some(e) => e.async_changed(value),
            None => Some(i32::MIN),
        };
        match changed {
            None if rc == NCCL_SUCCESS => {
                if let Some(r) = SHIM.existing() {
                    r.add_counter(counters::SHIM_ASYNC_POLLS, 1);
                    // A watchdog polling a hung comm is alive: say so without a record.
                    r.note_alive();
                }
            }
            prev => {
                let flags = call::context_flags();
                record_keep(|r, w| {
                    let mut e = Entry::new(RecordKind::Call, CallId::NcclCommGetAsyncError);
                    e.comm = comm as u64;
                    e.flags = flags;
                    e.rc = rc;
                    e.args = args::NcclCommGetAsyncError {
                        async_error: s(value),
                        previous: s(prev.unwrap_or(value)),
                    }
                    .to_args();
                    if call::is_failure_value(rc, value) {
                        // SAFETY: NCCL's static buffer or null.
                        if let Some(t) = unsafe { call::last_error(comm) } {
                            let off = r.append_blob(BlobKind::ErrorText, t.to_bytes());
                            if off != 0 {
                                e.blob = off;
                                e.flags |= ncclshim_dump::schema::slot_flags::HAS_ERROR_TEXT;
                            }
                        }
                    }
                    w.instant(&e);
                });
                // A non-blocking init that just finished: the comm can now be asked its device.
                if value == NCCL_SUCCESS {
                    if let Some(e) = entry {
                        if e.pending_init.swap(0, Ordering::Relaxed) == 1 {
                            write_comm_created(comm, e);
                        }
                    }
                }
            }
        }
    })
}
