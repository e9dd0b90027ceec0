//! The terminal under `ncclshim run`, handled as a shell's job control handles a foreground job.
//!
//! Why: the job runs in a process group of its own (so that a signal reaches all of it, see
//! [`crate::run`]), and a process group that is not the terminal's foreground group is stopped
//! (SIGTTIN) the moment it reads the terminal: `input()`, `breakpoint()` / pdb, a login prompt or
//! `read` would hang the job forever, and Ctrl-Z would stop only the wrapper. So, when stdin is
//! the wrapper's terminal and the wrapper is in its foreground (not started with `&`):
//! - the job's group becomes the foreground group before the job executes (done in the forked
//!   child, so that no read of the job can come first: [`child_takes_foreground`]);
//! - when the job stops (Ctrl-Z, or a read while in the background), the wrapper takes the
//!   terminal back with its own modes ([`Terminal::take_back`]) and stops itself, so that the
//!   shell above sees "Stopped" ([`stop_self`]); `fg` continues the wrapper, which gives the
//!   terminal to the job again with the job's modes and continues it ([`Terminal::give_to`]); `bg`
//!   continues it without the terminal, as a shell's `bg` does;
//! - when the job's main process ends, the wrapper takes the terminal back, and its own modes
//!   too when the job died of a signal (a program killed in raw mode leaves the terminal raw),
//!   as bash does; dropping the [`Terminal`] does the same on every other way out.
//!
//! Every terminal call is made with SIGTTOU blocked: a process that is not in the foreground
//! group is otherwise stopped by the kernel for changing the terminal, and the wrapper is not in
//! it while the job is. Without a terminal on stdin none of this happens.

/// The terminal on stdin and the wrapper's own process group and modes.
pub struct Terminal {
    our_group: libc::pid_t,
    /// The wrapper's terminal modes when it started, restored when it takes the terminal back
    /// from a job that stopped or died of a signal.
    ours: Option<libc::termios>,
    /// The job's modes when it stopped, given back with the terminal.
    job_modes: Option<libc::termios>,
    /// The job's process group, once it exists (for [`Drop`]).
    job: Option<libc::pid_t>,
}

const TTY: libc::c_int = libc::STDIN_FILENO;

/// The terminal's foreground process group, or `None` when stdin is no controlling terminal.
fn foreground() -> Option<libc::pid_t> {
    // SAFETY: tcgetpgrp only reads the terminal's foreground group; on a descriptor that is no
    // terminal (or not this session's) it returns -1.
    let g = unsafe { libc::tcgetpgrp(TTY) };
    (g > 0).then_some(g)
}

/// Runs `f` with SIGTTOU blocked in this thread (the terminal calls of a process outside the
/// foreground group then proceed instead of stopping it), then restores the mask.
fn without_sigttou<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigemptyset/sigaddset fill a set we own; pthread_sigmask changes this thread's mask
    // only, and the previous mask is put back below.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

impl Terminal {
    /// The terminal on stdin when the wrapper is its foreground job, `None` otherwise (no
    /// terminal: the job runs in its own group as before; started with `&`: the job must not
    /// take the terminal from the shell either, and reading it stops it, as any background job).
    pub fn foreground_on_stdin() -> Option<Self> {
        // SAFETY: isatty and getpgrp have no preconditions.
        let (tty, our_group) = unsafe { (libc::isatty(TTY) == 1, libc::getpgrp()) };
        if !tty || foreground() != Some(our_group) {
            return None;
        }
        // SAFETY: tcgetattr writes only the termios we own; its failure is checked.
        let ours = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            (libc::tcgetattr(TTY, &mut t) == 0).then_some(t)
        };
        Some(Self {
            our_group,
            ours,
            job_modes: None,
            job: None,
        })
    }

    /// The job's process group was created (the child took the terminal already).
    pub fn started(&mut self, job: libc::pid_t) {
        self.job = Some(job);
    }

    /// Takes the terminal back from whichever group has it: after a failed start, whose child
    /// may have taken it before its `exec` failed (its group is gone, its number unknown here).
    pub fn reclaim(&mut self) {
        if foreground() != Some(self.our_group) {
            let ours = self.our_group;
            // SAFETY: tcsetpgrp gives the terminal back to the wrapper's own group, which had it
            // when the child was started.
            without_sigttou(|| unsafe { libc::tcsetpgrp(TTY, ours) });
        }
    }

    /// Gives the terminal to the job's group (with the modes it had when it stopped) if the
    /// wrapper's group has it now: after `fg`, not after `bg`.
    pub fn give_to(&mut self, job: libc::pid_t) {
        if foreground() != Some(self.our_group) {
            return;
        }
        let modes = self.job_modes.take();
        without_sigttou(|| {
            // SAFETY: tcsetattr reads a termios tcgetattr filled; tcsetpgrp names the job's group,
            // which this wrapper created (a group that is gone makes it fail, changing nothing).
            unsafe {
                if let Some(m) = &modes {
                    libc::tcsetattr(TTY, libc::TCSADRAIN, m);
                }
                libc::tcsetpgrp(TTY, job);
            }
        });
    }

    /// Takes the terminal back from the job's group if it has it. `job_stopped`: keep the job's
    /// modes to give back with the terminal; `restore_ours`: put the wrapper's own modes back
    /// (the job stopped or died of a signal, and may have left the terminal raw).
    pub fn take_back(&mut self, job: libc::pid_t, job_stopped: bool, restore_ours: bool) {
        if foreground() != Some(job) {
            return;
        }
        let ours = self.ours;
        let job_modes = without_sigttou(|| {
            // SAFETY: tcgetattr writes a termios we own (checked); tcsetpgrp gives the terminal to
            // the wrapper's own group; tcsetattr reads the termios saved at the start.
            unsafe {
                let mut t: libc::termios = std::mem::zeroed();
                let job_modes = (job_stopped && libc::tcgetattr(TTY, &mut t) == 0).then_some(t);
                libc::tcsetpgrp(TTY, self.our_group);
                if let Some(o) = ours.as_ref().filter(|_| restore_ours) {
                    libc::tcsetattr(TTY, libc::TCSADRAIN, o);
                }
                job_modes
            }
        });
        if job_stopped {
            self.job_modes = job_modes;
        }
    }
}

impl Drop for Terminal {
    /// Every way out of `run` leaves the terminal with the wrapper's group (and so with the shell
    /// after it), never with a job that is gone.
    fn drop(&mut self) {
        if let Some(job) = self.job {
            self.take_back(job, false, false);
        }
    }
}

/// In the forked child, before it executes the job: makes the child's new process group the
/// terminal's foreground group. Async-signal-safe (setpgid, tcsetpgrp, pthread_sigmask only),
/// and it leaves SIGTTOU blocked: the caller restores the job's signal mask afterwards.
///
/// # Safety
/// Only in a forked child before `exec`, on the terminal the parent found in the foreground.
pub unsafe fn child_takes_foreground() {
    // SAFETY: setpgid(0, 0) puts the child in a group of its own (already done by
    // `process_group(0)`; repeating it changes nothing); tcsetpgrp with SIGTTOU blocked only
    // changes the terminal's foreground group, which the parent's group held.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::setpgid(0, 0);
        libc::tcsetpgrp(TTY, libc::getpid());
    }
}

/// Stops the wrapper as a shell's job is stopped (SIGTSTP, default action), so that the shell
/// that started it says "Stopped" and takes the terminal; returns once it is continued (`fg` or
/// `bg`). Returns at once where nothing could continue it: SIGTSTP ignored when `run` started,
/// or a process group with no job-controlling parent (an orphaned group, where the kernel
/// discards the signal, as it would for the job itself without the wrapper).
/// `tstp_blocked`: SIGTSTP is in the wrapper's blocked set (then it is let through for this).
pub fn stop_self(tstp_blocked: bool) {
    // SAFETY: sigemptyset/sigaddset fill a set we own; pthread_sigmask changes this thread's
    // mask; kill sends SIGTSTP to this very process, delivered before kill returns since it is
    // unblocked then (the wrapper has no other thread while the job runs).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTSTP);
        if tstp_blocked {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        libc::kill(libc::getpid(), libc::SIGTSTP);
        if tstp_blocked {
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
    }
}
