//! Installing a signal handler over whatever disposition a process already has, and later doing
//! what that disposition would have done: the part of chaining that the shim's fatal-signal
//! capture (`shim/src/signals.rs`) and the dump's SIGBUS guard ([`crate::fault_guard`]) share,
//! so both stay transparent to the host in the same way.
//!
//! - A disposition of SIG_IGN is left alone (an ignored signal stays ignored, and exec'd children
//!   still inherit it).
//! - Our handler carries the previous one's mask and its SA_RESTART, SA_ONSTACK, SA_NODEFER and
//!   SA_RESETHAND flags, so interrupted system calls, the alternate stack and one-shot handlers
//!   behave as before.
//! - [`Chained::forward`] calls the previous handler as the kernel would have (with or without
//!   SA_SIGINFO) or, for the default action, restores it and lets the signal take effect: a
//!   fault re-executes and faults again, a sent signal is sent again to the same thread.
//!
//! Everything a handler calls here is async-signal-safe: atomics, `sigaction`, `tgkill`.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};

/// An `SA_SIGINFO` handler.
pub type Handler = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);

/// The disposition our handler replaced for one signal, once it is installed.
pub struct Chained {
    previous: UnsafeCell<MaybeUninit<libc::sigaction>>,
    installed: AtomicBool,
}

// SAFETY: `previous` is written only by `install`, before the sigaction call that lets the
// handler run (a system call, so a full barrier), and `installed` is set after it; readers
// (`forward`) read `previous` only once `installed` says it was written.
unsafe impl Sync for Chained {}

impl Chained {
    pub const fn new() -> Self {
        Self {
            previous: UnsafeCell::new(MaybeUninit::zeroed()),
            installed: AtomicBool::new(false),
        }
    }

    /// Installs `handler` for `sig` over the current disposition (not over SIG_IGN), keeping
    /// the previous one to forward to. Returns whether it was installed. Call at most once per
    /// `Chained`, from one thread (the callers hold a once-flag).
    pub fn install(&self, sig: c_int, handler: Handler) -> bool {
        // SAFETY: plain sigaction calls with valid, zero-initialised structs; `previous` is
        // written before our handler is installed and can read it.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut current) != 0
                || current.sa_sigaction == libc::SIG_IGN
            {
                return false;
            }
            (*self.previous.get()).write(current);
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = handler as *const () as usize;
            ours.sa_mask = current.sa_mask;
            let kept = libc::SA_RESTART | libc::SA_ONSTACK | libc::SA_NODEFER | libc::SA_RESETHAND;
            ours.sa_flags = libc::SA_SIGINFO | (current.sa_flags & kept);
            let mut replaced: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &ours, &mut replaced) != 0 {
                return false;
            }
            if replaced.sa_sigaction != current.sa_sigaction {
                // Someone installed a handler between our two calls: chain to that one.
                (*self.previous.get()).write(replaced);
            }
        }
        self.installed.store(true, Ordering::Release);
        true
    }

    /// Does what the kernel would have done with the replaced disposition (nothing if ours was
    /// never installed). `sent`: the signal came from a process (kill, raise, abort), so under
    /// the default action it is sent again; otherwise it is a fault that re-executes.
    /// Returns [`Forwarded::HandlerReturned`] when the previous disposition was a handler and it
    /// returned (one that jumps away, `siglongjmp`, never comes back here).
    ///
    /// # Safety
    /// Called from our handler for `sig`, with the kernel's own `info` and `ctx` (or null).
    pub unsafe fn forward(
        &self,
        sig: c_int,
        info: *mut libc::siginfo_t,
        ctx: *mut c_void,
        sent: bool,
    ) -> Forwarded {
        if !self.installed.load(Ordering::Acquire) {
            return Forwarded::Nowhere;
        }
        // SAFETY: `installed` says `previous` was written before our handler was installed.
        let prev = unsafe { (*self.previous.get()).assume_init_ref() };
        match prev.sa_sigaction {
            libc::SIG_DFL => {
                // Default action (terminate, with a core for the fault signals): put it back
                // and let the signal act again.
                // SAFETY: sigaction with a valid zero-initialised struct; tgkill to ourselves.
                unsafe {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                    if sent {
                        // Blocked while we run (unless SA_NODEFER): takes effect when we return.
                        libc::syscall(
                            libc::SYS_tgkill,
                            libc::getpid(),
                            libc::syscall(libc::SYS_gettid),
                            sig,
                        );
                    }
                }
                Forwarded::Default
            }
            libc::SIG_IGN => Forwarded::Nowhere,
            handler if prev.sa_flags & libc::SA_SIGINFO != 0 => {
                // SAFETY: a disposition read back from sigaction with SA_SIGINFO holds a handler
                // of this signature; the kernel's own arguments are forwarded.
                let f = unsafe { std::mem::transmute::<usize, Handler>(handler) };
                f(sig, info, ctx);
                Forwarded::HandlerReturned
            }
            handler => {
                // SAFETY: without SA_SIGINFO the handler takes the signal number only.
                let f = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int)>(handler) };
                f(sig);
                Forwarded::HandlerReturned
            }
        }
    }
}

/// What [`Chained::forward`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// Nothing: ours was never installed, or the signal was ignored before.
    Nowhere,
    /// The default action was restored (and a sent signal sent again).
    Default,
    /// The program's own handler ran and returned to us.
    HandlerReturned,
}

impl Default for Chained {
    fn default() -> Self {
        Self::new()
    }
}
