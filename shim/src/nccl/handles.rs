//! Handle lookups of NCCL's API: `dlsym(handle, "ncclX")`, the way vLLM's, SGLang's and
//! Megatron's `pynccl` (`ctypes.CDLL(path)` + `getattr`) and C `dlopen` users reach NCCL. A
//! lookup through a handle searches that library's own scope, never the preloaded exports, so
//! without this those calls would not be seen at all.
//!
//! Each distinct libnccl reached this way gets a *library slot* (1..=[`LIBS`]; slot 0 is the
//! library the exports forward to, found by [`super::resolve`]; the slots are [`super::libs`]). When `dlsym(handle, "ncclX")`
//! answers a function of a libnccl (it also exports `pncclX`, at an address of the same object)
//! and `ncclX` is one of our exports, the caller gets a *bound stub* instead: a naked
//! trampoline per (slot, export) that tells this thread "the next export call is for slot k"
//! and jumps to the export with the caller's arguments and return address untouched. The
//! export's FFI boundary (`call::boundary`) takes that mark and, for the whole call, makes
//! every real NCCL function the body uses (the call itself, `ncclGetLastError`,
//! `ncclCommCuDevice`, ...) come from slot k's library ([`lookup`]). Two NCCLs in one process
//! therefore each get their calls and their own error text. A library that is slot 0's
//! library gets the plain export back.
//!
//! Untouched: lookups through `RTLD_NEXT`, of names we do not export, that fail, or that
//! answer a function of something that is not a libnccl. A lookup that would answer our own
//! export (`RTLD_DEFAULT`, a handle whose scope includes the preload: `dlopen(NULL)`) answers
//! "no such symbol" while no loaded NCCL defines the function, as it would without the shim
//! ([`decide_global`]); once one does, it answers our export. When every slot is taken by another
//! library the lookup passes through unwrapped and is counted ([`overflow_count`]): recording
//! is lost, behaviour is not.
//!
//! The lookup path allocates nothing and takes no lock: a few real `dlsym` / `dladdr` calls and
//! compare-and-swaps on fixed tables. The library's own NOLOAD handle (so it stays mapped while
//! we hold pointers into it) is taken at its first call, outside any `dlsym`, and a library
//! snapshot is recorded then, so every libnccl the program uses is in the dump.
//!
//! `dladdr` / `dladdr1` are interposed too: asked about one of our exports or stubs, they
//! answer about the real function it forwards to (nccl4py locates libnccl with `dladdr` on a
//! function pointer). Any other address is passed to glibc as it is.

use crate::nccl::libs::{self, real_dladdr, real_fn, LIBS};
use std::ffi::{c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

type Dladdr1Fn =
    unsafe extern "C" fn(*const c_void, *mut libc::Dl_info, *mut *mut c_void, i32) -> i32;

static REAL_DLADDR1: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// Defines the export list (names, `pnccl` names, export addresses) and, on x86_64 Linux, one
/// bound stub per export and slot. Must name every `#[no_mangle]` `nccl*` export of
/// `exports/` (a test checks the built library against it).
macro_rules! exports {
    ($($name:ident),* $(,)?) => {
        /// The exported `nccl*` wrappers; a name's index is its row in the tables below.
        pub const NAMES: &[&str] = &[$(stringify!($name)),*];
        const PNAMES: &[&str] = &[$(concat!("p", stringify!($name), "\0")),*];
        const CNAMES: &[&str] = &[$(concat!(stringify!($name), "\0")),*];

        /// Addresses of the exported wrappers, by index.
        fn export_addrs() -> [usize; N] {
            [$(crate::nccl::exports::$name as *const () as usize),*]
        }

        /// Addresses of slot `k`'s bound stubs, by index (`k` in 1..=LIBS).
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        fn stub_addrs(k: usize) -> [usize; N] {
            const _: () = assert!(LIBS == 4, "stub_addrs lists one arm per slot");
            match k {
                1 => [$(stubs::$name::<1> as *const () as usize),*],
                2 => [$(stubs::$name::<2> as *const () as usize),*],
                3 => [$(stubs::$name::<3> as *const () as usize),*],
                4 => [$(stubs::$name::<4> as *const () as usize),*],
                _ => [0; N],
            }
        }

        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        #[allow(non_snake_case)] // named after the export each one enters
        mod stubs {
            $(
                /// Bound stub: marks this thread's next export call as slot `K`'s, then
                /// tail-jumps to the export.
                #[unsafe(naked)]
                pub(super) unsafe extern "C" fn $name<const K: usize>() {
                    // Entry rsp ≡ 8 (mod 16). The six argument registers are kept across the
                    // call (stack arguments are not touched: rsp is back at its entry value for
                    // the jump, so the export sees the caller's frame and return address).
                    core::arch::naked_asm!(
                        ".cfi_startproc",
                        "push rdi",
                        ".cfi_adjust_cfa_offset 8",
                        "push rsi",
                        ".cfi_adjust_cfa_offset 8",
                        "push rdx",
                        ".cfi_adjust_cfa_offset 8",
                        "push rcx",
                        ".cfi_adjust_cfa_offset 8",
                        "push r8",
                        ".cfi_adjust_cfa_offset 8",
                        "push r9",
                        ".cfi_adjust_cfa_offset 8",
                        "sub rsp, 8",
                        ".cfi_adjust_cfa_offset 8",
                        "mov edi, {k}",
                        "call {mark}",
                        "add rsp, 8",
                        ".cfi_adjust_cfa_offset -8",
                        "pop r9",
                        ".cfi_adjust_cfa_offset -8",
                        "pop r8",
                        ".cfi_adjust_cfa_offset -8",
                        "pop rcx",
                        ".cfi_adjust_cfa_offset -8",
                        "pop rdx",
                        ".cfi_adjust_cfa_offset -8",
                        "pop rsi",
                        ".cfi_adjust_cfa_offset -8",
                        "pop rdi",
                        ".cfi_adjust_cfa_offset -8",
                        "jmp {target}",
                        ".cfi_endproc",
                        k = const K,
                        mark = sym super::mark_next,
                        target = sym crate::nccl::exports::$name,
                    )
                }
            )*
        }
    };
}

exports!(
    ncclGetVersion,
    ncclGetUniqueId,
    ncclCommInitRank,
    ncclCommInitRankConfig,
    ncclCommInitRankScalable,
    ncclCommInitAll,
    ncclCommSplit,
    ncclCommShrink,
    ncclCommGrow,
    ncclCommFinalize,
    ncclCommDestroy,
    ncclCommAbort,
    ncclCommRevoke,
    ncclCommGetAsyncError,
    ncclGroupStart,
    ncclGroupEnd,
    ncclAllReduce,
    ncclBroadcast,
    ncclBcast,
    ncclReduce,
    ncclAllGather,
    ncclReduceScatter,
    ncclAlltoAll,
    ncclGather,
    ncclScatter,
    ncclSend,
    ncclRecv,
    ncclMemAlloc,
    ncclMemFree,
    ncclCommRegister,
    ncclCommDeregister,
    ncclCommWindowRegister,
    ncclCommWindowDeregister,
    ncclCommSuspend,
    ncclCommResume,
    ncclCommGetUniqueId,
    ncclRedOpCreatePreMulSum,
    ncclRedOpDestroy,
    ncclAllReduceConfig,
    ncclBroadcastConfig,
    ncclReduceConfig,
    ncclAllGatherConfig,
    ncclReduceScatterConfig,
    ncclAlltoAllConfig,
    ncclGatherConfig,
    ncclScatterConfig,
    ncclCommMemStats,
    ncclWinGetUserPtr,
    ncclGroupSimulateEnd,
    ncclPutSignal,
    ncclSignal,
    ncclWaitSignal,
    ncclDevCommCreate,
    ncclDevCommDestroy,
);

const N: usize = NAMES.len();

/// The `pncclX` each handle lookup answered, `[slot][export]` (slot 0 unused): what a bound
/// stub's `dladdr` names.
static LOOKED_UP: [[AtomicPtr<c_void>; N]; LIBS + 1] =
    [const { [const { AtomicPtr::new(null_mut()) }; N] }; LIBS + 1];
/// Slot 0's real functions by export, for `dladdr` on an export.
static EXPORT_REAL: [AtomicPtr<c_void>; N] = [const { AtomicPtr::new(null_mut()) }; N];
/// Handle lookups of a libnccl passed through because every slot held another library.
static OVERFLOW: AtomicU64 = AtomicU64::new(0);

/// Handle lookups left unwrapped because all [`LIBS`] slots were taken, since the process started.
pub fn overflow_count() -> u64 {
    OVERFLOW.load(Ordering::Relaxed)
}

/// The index of export `name`, if it is one.
fn index_of(name: &[u8]) -> Option<usize> {
    if !name.starts_with(b"nccl") {
        return None;
    }
    NAMES.iter().position(|n| n.as_bytes() == name)
}

/// Called by a bound stub (in its own frame, with the argument registers saved): the thread's
/// next export call is slot `k`'s. Cannot panic.
extern "C" fn mark_next(k: u32) {
    crate::runtime::thread::set_next_lib(k as u8);
}

/// The real function behind `addr` when it is the entry of one of our exports (slot 0's real
/// function, resolved if needed) or bound stubs (what the handle lookup answered); else `addr`.
fn translate(addr: *const c_void) -> *const c_void {
    let a = addr as usize;
    if let Some(i) = export_addrs().iter().position(|&e| e == a) {
        let p = super::resolve::lookup(&EXPORT_REAL[i], PNAMES[i], CNAMES[i]);
        return if p.is_null() { addr } else { p };
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    for (k, looked_up) in LOOKED_UP.iter().enumerate().skip(1) {
        if let Some(i) = stub_addrs(k).iter().position(|&e| e == a) {
            let p = looked_up[i].load(Ordering::Acquire);
            return if p.is_null() { addr } else { p };
        }
    }
    addr
}

/// Lowest and highest entry address of our exports and stubs (0, 0 until computed): `dladdr`
/// of anything outside costs two compares.
static RANGE: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

fn ours_range() -> (usize, usize) {
    let (lo, hi) = (
        RANGE[0].load(Ordering::Relaxed),
        RANGE[1].load(Ordering::Relaxed),
    );
    if hi != 0 {
        return (lo, hi);
    }
    let exports = export_addrs();
    let (mut lo, mut hi) = (usize::MAX, 0);
    for a in exports {
        (lo, hi) = (lo.min(a), hi.max(a));
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    for k in 1..=LIBS {
        for a in stub_addrs(k) {
            (lo, hi) = (lo.min(a), hi.max(a));
        }
    }
    RANGE[0].store(lo, Ordering::Relaxed);
    RANGE[1].store(hi, Ordering::Relaxed);
    (lo, hi)
}

/// `addr`, or the real function it stands for (see [`translate`]). Never panics.
fn dladdr_target(addr: *const c_void) -> *const c_void {
    let (lo, hi) = (
        RANGE[0].load(Ordering::Relaxed),
        RANGE[1].load(Ordering::Relaxed),
    );
    let a = addr as usize;
    if hi != 0 && (a < lo || a > hi) {
        return addr;
    }
    std::panic::catch_unwind(|| {
        let (lo, hi) = ours_range();
        if a < lo || a > hi {
            addr
        } else {
            translate(addr)
        }
    })
    .unwrap_or(addr)
}

/// Interposed `dladdr`: about one of our exports or bound stubs it answers as about the real
/// NCCL function behind it; anything else is glibc's answer. Exported unversioned, like
/// `dlsym`, so it binds `dladdr@GLIBC_2.2.5` and `@GLIBC_2.34` references.
///
/// # Safety
/// Same contract as glibc's `dladdr`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dladdr(addr: *const c_void, info: *mut libc::Dl_info) -> i32 {
    let target = dladdr_target(addr);
    // SAFETY: the caller's own arguments (the address possibly swapped for the real
    // function's), under dladdr's contract.
    unsafe { real_dladdr(target, info) }
}

/// Interposed `dladdr1`, as [`dladdr`].
///
/// # Safety
/// Same contract as glibc's `dladdr1`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dladdr1(
    addr: *const c_void,
    info: *mut libc::Dl_info,
    extra: *mut *mut c_void,
    flags: i32,
) -> i32 {
    let target = dladdr_target(addr);
    let p = real_fn(&REAL_DLADDR1, c"dladdr1");
    if p.is_null() {
        return 0;
    }
    // SAFETY: p is glibc's dladdr1, of this signature; the caller's own arguments under its
    // contract.
    unsafe { std::mem::transmute::<*mut c_void, Dladdr1Fn>(p)(target, info, extra, flags) }
}

/// The `dlsym` hook's answer for a name starting with `nc` (see the module doc): a bound stub,
/// slot 0's export, or null to let glibc answer untouched. Runs inside `dlsym`: no allocation,
/// no lock, no `dlopen`; only the real `dlsym` and `dladdr`. `extern "C"`: it catches its own
/// panics, and the trampoline's decider then tail-calls it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[cold]
#[inline(never)]
pub(crate) extern "C" fn decide(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // RTLD_NEXT depends on who asks (only the jump keeps that right).
    if handle == libc::RTLD_NEXT {
        return null_mut();
    }
    if handle == libc::RTLD_DEFAULT {
        return std::panic::catch_unwind(|| decide_global(symbol)).unwrap_or(null_mut());
    }
    std::panic::catch_unwind(|| decide_handle(handle, symbol)).unwrap_or(null_mut())
}

/// A lookup whose answer is our export because the preload is in its scope (`RTLD_DEFAULT`,
/// `dlopen(NULL)`'s handle, what `ctypes.CDLL(None)` uses): without the shim a program that
/// probes this way before loading NCCL gets "no such symbol" and takes its no-NCCL branch (or
/// loads libnccl itself); with it, it would find our wrapper and a false NCCL. The same holds
/// for an API the loaded NCCL lacks (`ncclCommShrink` under NCCL 2.21): our export would
/// promise it. So while the real function behind the export cannot be found, the answer is
/// [`NOT_FOUND`], its `dlerror` set by a failed search; once it can, our export, so calls
/// through it are recorded. Only names we export come here.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn decide_global(symbol: *const c_char) -> *mut c_void {
    // SAFETY: `symbol` is non-null and NUL-terminated (dlsym's contract; checked by the caller).
    let name = unsafe { std::ffi::CStr::from_ptr(symbol) }.to_bytes();
    match index_of(name) {
        Some(i) if real_missing(i, symbol) => crate::symbols::dlsym::NOT_FOUND,
        _ => null_mut(),
    }
}

/// Whether export `i` has no real function to call: no loaded NCCL defines it (found the way
/// the export itself finds it, `super::resolve`). Leaves `dlerror` set by a failed search of
/// `symbol` after the preload when it says so.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn real_missing(i: usize, symbol: *const c_char) -> bool {
    if !super::resolve::lookup(&EXPORT_REAL[i], PNAMES[i], CNAMES[i]).is_null() {
        return false;
    }
    let dlsym = crate::symbols::dlsym::real_dlsym();
    // SAFETY: the real dlsym from our own frame: RTLD_NEXT searches the objects after the
    // shim, never the shim itself; `symbol` is NUL-terminated. A miss sets dlerror.
    unsafe { dlsym(libc::RTLD_NEXT, symbol) }.is_null()
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn decide_handle(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: `symbol` is non-null and NUL-terminated (dlsym's contract; checked by the caller).
    let name = unsafe { std::ffi::CStr::from_ptr(symbol) }.to_bytes();
    let Some(i) = index_of(name) else {
        return null_mut();
    };
    let dlsym = crate::symbols::dlsym::real_dlsym();
    // SAFETY: the real dlsym with the caller's own handle and name; for a handle the answer
    // does not depend on who asks.
    let real = unsafe { dlsym(handle, symbol) };
    if export_addrs()[i] == real as usize {
        // The handle's scope holds the preload (`dlopen(NULL)`): as `RTLD_DEFAULT`.
        return if real_missing(i, symbol) {
            crate::symbols::dlsym::NOT_FOUND
        } else {
            null_mut()
        };
    }
    if real.is_null() {
        return null_mut();
    }
    // SAFETY: PNAMES[i] is NUL-terminated; same handle.
    let p = unsafe { dlsym(handle, PNAMES[i].as_ptr().cast()) };
    if p.is_null() {
        return null_mut();
    }
    let Some(base) = libs::object_base(real) else {
        return null_mut();
    };
    if libs::object_base(p) != Some(base) {
        return null_mut();
    }
    if libs::slot0_base() == base {
        return export_addrs()[i] as *mut c_void;
    }
    let Some(k) = libs::claim(base) else {
        OVERFLOW.fetch_add(1, Ordering::Relaxed);
        return null_mut();
    };
    LOOKED_UP[k][i].store(p, Ordering::Release);
    libs::note_lookup(k, p);
    stub_addrs(k)[i] as *mut c_void
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_exports() {
        assert!(NAMES.iter().all(|n| n.starts_with("nccl")));
        assert_eq!(index_of(b"ncclGetVersion"), Some(0));
        assert_eq!(index_of(b"ncclGetErrorString"), None);
        assert_eq!(index_of(b"pncclGetVersion"), None);
        let mut seen = std::collections::HashSet::new();
        assert!(export_addrs().iter().all(|a| *a != 0 && seen.insert(*a)));
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn every_stub_is_distinct() {
        let mut seen: std::collections::HashSet<usize> = export_addrs().into_iter().collect();
        for k in 1..=LIBS {
            for a in stub_addrs(k) {
                assert!(a != 0 && seen.insert(a));
            }
        }
        assert_eq!(stub_addrs(0), [0; N]);
    }
}
