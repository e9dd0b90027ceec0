//! The life of one intercepted call: record at entry (in flight), forward, complete in place
//! with the return code and, on failure, NCCL's own `ncclGetLastError()` text captured before
//! anything else can overwrite that process-wide buffer. Also the FFI boundary every export
//! runs in (no panic crosses it). The per-thread nesting and group state is the runtime's
//! ([`crate::runtime::thread`]), re-exported here for the exports.

use crate::nccl::ffi::{is_failure, NcclComm, NcclResult, NCCL_INTERNAL_ERROR};
use crate::nccl::resolve::real;
use crate::runtime::recorder::{record, record_keep, SHIM};
use crate::runtime::thread::take_next_lib;
pub use crate::runtime::thread::{context_flags, forward, group_depth, nested, set_group_depth};
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{BlobKind, CallId, Entry, PendingCall, RecordKind};
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// A call recorded at entry (or not, when recording is off or we are inside our own code).
pub struct Active(Option<PendingCall>);

/// Records the entry of `call` on `comm` with `args`: a rare call (`CallId::is_kept`:
/// lifecycle, uniqueId) in the keep ring, a hot or routine one in the thread's own ring, so
/// that no volume of successful calls can push a rare record or a failure out of the keep ring
/// (failures are copied there when they complete, see `keep_copy`).
#[inline]
pub fn enter(call: CallId, comm: NcclComm, args: [u64; SLOT_ARGS]) -> Active {
    let entry = Entry {
        kind: RecordKind::Call,
        call,
        comm: comm as u64,
        flags: context_flags(),
        rc: 0,
        blob: 0,
        args,
    };
    Active(if call.is_kept() {
        record_keep(|_, w| w.begin(&entry))
    } else {
        record(|_, w| w.begin(&entry))
    })
}

/// Copies a successful call from its thread's ring into the keep ring (flagged `KEEP_COPY`, same
/// entry time and arguments) the first time per dump file: `kept_in` remembers the recorder that
/// has its copy (a forked child's new file gets its own). For the first successful
/// `ncclGetVersion` (the version fact). Its result arguments must already be set.
pub fn keep_first_success(p: &PendingCall, kept_in: &AtomicPtr<ncclshim_dump::Recorder>) {
    record(|r, w| {
        let me = (r as *const ncclshim_dump::Recorder).cast_mut();
        if kept_in.swap(me, Ordering::Relaxed) != me {
            keep_copy(r, w.tid(), p, crate::nccl::ffi::NCCL_SUCCESS);
        }
    });
}

/// A failed hot or routine call is copied into the keep ring (flagged `KEEP_COPY`, same entry
/// time and arguments, NCCL's text), so the failure survives the thread's ring wrapping later.
fn keep_copy(r: &'static ncclshim_dump::Recorder, tid: u32, p: &PendingCall, rc: NcclResult) {
    let Some(keep) = r.keep_writer(tid) else {
        return;
    };
    if p.slot_ref().ring == r.keep_ring_index() {
        return;
    }
    let Some(mut e) = p.entry() else { return };
    e.flags |= slot_flags::KEEP_COPY;
    keep.begin_at(&e, p.t_enter()).complete(rc);
}

impl Active {
    /// Entry time of the record (record time base; 0 when nothing was recorded).
    #[inline]
    pub fn t_enter(&self) -> u64 {
        self.0.as_ref().map_or(0, PendingCall::t_enter)
    }

    /// Completes the record: `extra` fills result arguments, then the error text (on failure)
    /// and the return code are written.
    #[inline]
    // `comm` is never dereferenced: it only goes to ncclGetLastError, which ignores it.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn finish(self, rc: NcclResult, comm: NcclComm, extra: impl FnOnce(&PendingCall)) {
        let Some(p) = self.0 else { return };
        if !is_failure(rc) {
            // The success path only stores into the slot this thread owns: no reentrancy, no
            // errno-changing call, nothing that can panic short of a bug in `extra`.
            if catch_unwind(AssertUnwindSafe(|| extra(&p))).is_err() {
                SHIM.disable("internal panic while completing a record");
            }
            p.complete(rc);
            return;
        }
        record(|r, w| {
            extra(&p);
            // SAFETY: last_error returns NCCL's NUL-terminated static buffer or null.
            if let Some(text) = unsafe { last_error(comm) } {
                let off = r.append_blob(BlobKind::ErrorText, text.to_bytes());
                if off != 0 {
                    p.set_blob(off, slot_flags::HAS_ERROR_TEXT);
                }
            }
            keep_copy(r, w.tid(), &p, rc);
            p.complete(rc);
        });
    }
}

/// NCCL's last WARN text (`ncclGetLastError`, process-wide, the comm argument is ignored).
///
/// # Safety
/// Calls into NCCL; the returned reference is valid until NCCL's next WARN.
pub unsafe fn last_error<'a>(comm: NcclComm) -> Option<&'a CStr> {
    let f = real!(
        "ncclGetLastError",
        unsafe extern "C" fn(NcclComm) -> *const c_char
    )?;
    let p = forward(|| f(comm));
    (!p.is_null()).then(|| CStr::from_ptr(p))
}

/// Bit per CallId (low 64 ids) already noted as missing, so the note is written once.
static MISSING_NOTED: AtomicU64 = AtomicU64::new(0);

/// The loaded NCCL does not export this function: the program could not have called it without
/// the shim, so it gets ncclInternalError and the dump gets a note saying why.
#[cold]
pub fn missing(call: CallId) -> NcclResult {
    let bit = 1u64 << ((call as u16) & 63);
    if MISSING_NOTED.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
        record_keep(|r, w| {
            let msg = format!(
                "{} was called but no loaded NCCL exports p{} or {}: returned ncclInternalError",
                call.name(),
                call.name(),
                call.name()
            );
            let blob = r.append_blob(BlobKind::Text, msg.as_bytes());
            let mut e = Entry::new(RecordKind::Event, CallId::RecorderNote);
            e.blob = blob;
            w.instant(&e);
        });
    }
    NCCL_INTERNAL_ERROR
}

/// The boundary every export runs its body in. `rc` is set by the body as soon as NCCL returned,
/// so a panic in our code after that still hands the caller NCCL's own result. An export
/// entered through a bound stub (`handles`) runs with that stub's library for the whole call.
#[inline]
pub fn boundary(body: impl FnOnce(&mut Option<NcclResult>)) -> NcclResult {
    let k = take_next_lib();
    if k != 0 {
        return bound_boundary(k, body);
    }
    run_body(body)
}

/// A call through library slot `k`'s stub: every real function it uses comes from that library
/// (nested calls NCCL makes through our exports too); the slot's first call takes a library
/// snapshot.
#[cold]
#[inline(never)]
fn bound_boundary(k: u8, body: impl FnOnce(&mut Option<NcclResult>)) -> NcclResult {
    let prev = crate::runtime::thread::replace_lib(k);
    if catch_unwind(|| crate::nccl::libs::first_call(usize::from(k))).is_err() {
        SHIM.disable("internal panic while taking a library snapshot");
    }
    let rc = run_body(body);
    crate::runtime::thread::restore_lib(prev);
    rc
}

#[inline]
fn run_body(body: impl FnOnce(&mut Option<NcclResult>)) -> NcclResult {
    let mut rc = None;
    match catch_unwind(AssertUnwindSafe(|| body(&mut rc))) {
        Ok(()) => rc.unwrap_or(NCCL_INTERNAL_ERROR),
        Err(_) => {
            SHIM.disable("internal panic in an NCCL wrapper");
            rc.unwrap_or(NCCL_INTERNAL_ERROR)
        }
    }
}

/// Whether a GetAsyncError poll reports a failure (its rc, or the async error it returned).
#[inline]
pub fn is_failure_value(rc: NcclResult, value: NcclResult) -> bool {
    is_failure(rc) || is_failure(value)
}
