//! A stack of the recorder's own for its rare, heavy work (creating the dump, the once-per-file
//! setup, a thread's first ring, snapshots), so that work never runs on the host thread's stack.
//!
//! A host may make its first NCCL call from a thread with a small stack (Python's
//! `threading.stack_size(32768)`, C worker pools sized to their own code). That work formats
//! paths, reads `/proc` and `getifaddrs` (4 KiB of netlink buffer on glibc's stack) and builds
//! JSON: a first `ncclGetVersion` took 13 KiB of stack under a release shim (22 KiB under a debug
//! one) where NCCL's own took 4.5 KiB, so a thread with room for the call without the shim
//! crashed with it. On its own stack, the first call costs the host's thread what any other
//! recorded call does.
//!
//! The same thread switches stacks; no helper thread is spawned. The work keeps its thread-locals
//! (the reentrancy guard, the thread's ring), its tid, and the locks the caller holds: a first call
//! made from a library constructor runs under the loader's lock, which a helper thread reaching
//! `dladdr` or `dlopen` would wait for forever. Nothing can refuse it (no `RLIMIT_NPROC`).
//!
//! The stack is mapped for each use and unmapped after it: the work is rare, and a mapping per use
//! leaves nothing to share between threads, to lock, or to inherit across `fork`. A guard page
//! below it turns an overflow into a fault, never into a write over other memory. Where the stack
//! cannot be mapped (no memory) or the target cannot switch stacks, the work runs where it is, as
//! it did before.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Usable bytes of the recorder's stack: about ten times what the heaviest work (the first call
/// of a debug build) was measured to take. Only the pages touched are ever backed by memory.
pub const OWN_STACK_BYTES: usize = 256 * 1024;

/// Runs `f` on a stack of its own ([`OWN_STACK_BYTES`]) on this thread, catching a panic as
/// [`catch_unwind`] does (a panic never unwinds across the switch, and the payload comes back to
/// be handled on the caller's stack). Runs `f` on the caller's stack when no stack can be mapped.
pub fn catch_unwind_on_own_stack<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    let guarded = move || catch_unwind(AssertUnwindSafe(f));
    match OwnStack::map() {
        Some(stack) => stack.run(guarded),
        None => guarded(),
    }
}

/// As [`catch_unwind_on_own_stack`], for work that is not expected to panic: a panic is carried
/// back and resumed on the caller's stack, where the caller's own guard catches it.
pub fn run_on_own_stack<R>(f: impl FnOnce() -> R) -> R {
    match catch_unwind_on_own_stack(f) {
        Ok(v) => v,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// One mapping: a guard page, then the usable stack above it (stacks grow down on every target
/// the recorders build for; `psm` checks the direction itself).
struct OwnStack {
    mapping: *mut u8,
    len: usize,
    guard: usize,
}

impl OwnStack {
    fn map() -> Option<Self> {
        if !SWITCHABLE {
            return None;
        }
        // SAFETY: sysconf has no memory effects.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())?;
        let usable = OWN_STACK_BYTES.next_multiple_of(page);
        let len = usable + page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let stack = Self {
            mapping: p.cast(),
            len,
            guard: page,
        };
        // SAFETY: the lowest page of the mapping made above, which nothing else uses.
        if unsafe { libc::mprotect(p, page, libc::PROT_NONE) } != 0 {
            return None; // `stack` unmaps on drop
        }
        Some(stack)
    }

    fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: `map` made the region [mapping + guard, mapping + len) readable and writable
        // and page-aligned (so aligned for any target's stack), and keeps it mapped until `self`
        // drops, after `on_stack` returned. `f` cannot unwind: `catch_unwind_on_own_stack` hands
        // it in with its panics caught.
        unsafe { switch(self.mapping.add(self.guard), self.len - self.guard, f) }
    }
}

impl Drop for OwnStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `map`; nothing refers into it once `run` returned.
        unsafe { libc::munmap(self.mapping.cast(), self.len) };
    }
}

psm::psm_stack_manipulation! {
    yes {
        const SWITCHABLE: bool = true;

        /// Runs `f` with the stack pointer at the top of `[base, base + size)`.
        ///
        /// # Safety
        /// As `psm::on_stack`: the region is mapped, writable and aligned, and `f` never unwinds.
        unsafe fn switch<R>(base: *mut u8, size: usize, f: impl FnOnce() -> R) -> R {
            // SAFETY: the caller's contract is psm's.
            unsafe { psm::on_stack(base, size, f) }
        }
    }
    no {
        const SWITCHABLE: bool = false;

        /// Never reached: [`OwnStack::map`] maps nothing where stacks cannot be switched.
        unsafe fn switch<R>(_base: *mut u8, _size: usize, f: impl FnOnce() -> R) -> R {
            f()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's own stack, as `[low, high)`.
    fn thread_stack() -> (usize, usize) {
        // SAFETY: pthread_getattr_np fills the zeroed attr for the calling thread; it is
        // destroyed after its stack is read.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let mut low = std::ptr::null_mut();
            let mut size = 0;
            assert_eq!(libc::pthread_attr_getstack(&attr, &mut low, &mut size), 0);
            libc::pthread_attr_destroy(&mut attr);
            (low as usize, low as usize + size)
        }
    }

    /// The work runs off the thread's stack, on the same thread, and gets its result back.
    #[test]
    fn work_runs_off_the_thread_stack_on_the_same_thread() {
        let (low, high) = thread_stack();
        let thread = std::thread::current().id();
        let (inner_at, same_thread) = catch_unwind_on_own_stack(|| {
            let inner = 0u8;
            (
                std::hint::black_box(&inner) as *const u8 as usize,
                std::thread::current().id() == thread,
            )
        })
        .unwrap();
        assert!(same_thread);
        assert!(
            !(low..high).contains(&inner_at),
            "{inner_at:#x} is on the thread's stack {low:#x}..{high:#x}"
        );
    }

    /// A panic in the work comes back as an error; the caller's stack is intact after it.
    #[test]
    fn a_panic_comes_back_as_an_error() {
        let r = catch_unwind_on_own_stack(|| -> u32 { panic!("inside") });
        let payload = r.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"inside"));
        assert_eq!(catch_unwind_on_own_stack(|| 7).unwrap(), 7);
    }

    /// Work that needs more stack than a small host thread has in all fits.
    #[test]
    fn work_larger_than_the_thread_stack_fits() {
        const WORK: usize = 80 * 1024;
        let on_small = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| {
                catch_unwind_on_own_stack(|| {
                    let buf = std::hint::black_box([1u8; WORK]);
                    buf.iter().map(|&b| usize::from(b)).sum::<usize>()
                })
                .unwrap()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(on_small, WORK);
    }
}
