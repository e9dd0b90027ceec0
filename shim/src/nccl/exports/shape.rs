//! The shape most NCCL exports share (`recorded`, the [`export!`] macro that writes one) and
//! the argument-word helpers every family uses.

use crate::nccl::call::{enter, forward, missing};
use crate::nccl::ffi::*;
use ncclshim_dump::layout::SLOT_ARGS;
use ncclshim_dump::{CallId, PendingCall};
use std::ffi::c_int;

/// Sign-extends a C int into an argument word.
#[inline(always)]
pub fn s(v: c_int) -> u64 {
    i64::from(v) as u64
}

#[inline(always)]
pub fn p<T>(ptr: *const T) -> u64 {
    ptr as usize as u64
}

/// The shape most wrappers share. Without the real function the caller gets `missing`'s
/// ncclInternalError; otherwise the entry of `call` on `comm` is recorded with the arguments
/// `args` makes (only now, so a missing function takes no sequence number), `fwd` makes the
/// real call, its result goes to the caller at once (`out`) and the record is completed;
/// `on_success` fills the result arguments, only when NCCL returned ncclSuccess (it may not
/// have written its out-values otherwise). Returns the caller's result.
#[inline(always)]
pub fn recorded<F>(
    out: &mut Option<NcclResult>,
    real: Option<F>,
    call: CallId,
    comm: NcclComm,
    args: impl FnOnce() -> [u64; SLOT_ARGS],
    fwd: impl FnOnce(F) -> NcclResult,
    on_success: impl FnOnce(&PendingCall),
) -> NcclResult {
    let Some(f) = real else {
        let rc = missing(call);
        *out = Some(rc);
        return rc;
    };
    let a = enter(call, comm, args());
    let rc = forward(|| fwd(f));
    *out = Some(rc);
    a.finish(rc, comm, |pc| {
        if rc == NCCL_SUCCESS {
            on_success(pc);
        }
    });
    rc
}

/// Defines an export of the common shape (see `recorded`): its C signature, forwarded as it
/// is, the comm its record is on, the entry arguments (the call's `schema::args` view, result
/// fields left 0), and the result arguments `on_success` fills (after ncclSuccess,
/// out-pointers only once checked non-null) at their `arg_index!`.
macro_rules! export {
    ($fn_name:ident, $name:literal, $call:expr, ($($arg:ident : $ty:ty),*),
     comm = $comm:expr, args = $args:expr, on_success = |$pc:ident| $fill:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn_name($($arg: $ty),*) -> NcclResult {
            boundary(|out| {
                type F = unsafe extern "C" fn($($ty),*) -> NcclResult;
                let fwd = |f: F| f($($arg),*);
                let entry = || ArgView::to_args(&$args);
                recorded(out, real!($name, F), $call, $comm, entry, fwd, |$pc| $fill);
            })
        }
    };
    // A call with no result arguments.
    ($fn_name:ident, $name:literal, $call:expr, ($($arg:ident : $ty:ty),*),
     comm = $comm:expr, args = $args:expr) => {
        export!($fn_name, $name, $call, ($($arg: $ty),*),
            comm = $comm, args = $args, on_success = |_pc| ());
    };
}
pub(crate) use export;
