//! How each process ended, from its own marks only (DESIGN.md, "Signs of life and of death"):
//! a clean exit with its status, a fatal signal of its own (a fault) or one sent by another
//! process (a launcher's SIGTERM, Ctrl-C), an abort by its own framework after it gave up on a
//! communicator (PyTorch's watchdog: `ncclCommAbort`, then SIGABRT), no mark at all (SIGKILL,
//! the OOM killer, a lost node), or still running when the dumps were read.

use crate::model::{is_termination_signal, ProcessModel};
use ncclshim_format::CallId;

/// SIGABRT: what `std::abort` raises, the end of a framework that gives up.
const SIGABRT: u64 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The writer is still alive: the process runs (or the dumps were read while it did).
    Running,
    /// It exited on its own: `exit` (atexit ran) or `_exit` (fork children, `os._exit`), with the
    /// status when the recorder saw it.
    Exited {
        status: Option<i32>,
        underscore: bool,
        t: u64,
    },
    /// A signal raised by its own fault (SIGSEGV, SIGBUS…) or an abort not preceded by NCCL
    /// giving up: it crashed.
    Crashed { signo: u64, t: u64 },
    /// A request to stop (SIGTERM, SIGINT, SIGHUP), usually from the launcher or the user.
    Stopped {
        signo: u64,
        t: u64,
        sender: Option<u32>,
    },
    /// Its framework gave up: it aborted a communicator or got an NCCL error, then SIGABRT.
    Aborted { t: u64 },
    /// Its dump ends with no mark: killed with SIGKILL, by the OOM killer, or its node was lost.
    /// `last_seen` is its last sign of life, a lower bound of the end.
    Vanished { last_seen: u64 },
}

impl Ending {
    /// The process ended without choosing to (not running, not a clean exit).
    pub fn is_abnormal(self) -> bool {
        !matches!(self, Ending::Running | Ending::Exited { .. })
    }

    /// When it ended (for a vanished process: its last sign of life).
    pub fn time(self) -> Option<u64> {
        match self {
            Ending::Running => None,
            Ending::Exited { t, .. }
            | Ending::Crashed { t, .. }
            | Ending::Stopped { t, .. }
            | Ending::Aborted { t } => Some(t),
            Ending::Vanished { last_seen } => Some(last_seen),
        }
    }

    /// Words for evidence lines: `exited with status 1`, `received SIGSEGV`.
    pub fn describe(self) -> String {
        match self {
            Ending::Running => "still running when the dumps were read".into(),
            Ending::Exited {
                status, underscore, ..
            } => {
                let how = if underscore { "_exit" } else { "exit" };
                match status {
                    Some(s) => format!("exited ({how}) with status {s}"),
                    None => format!("exited cleanly ({how})"),
                }
            }
            Ending::Crashed { signo, .. } => {
                format!("crashed with {}", crate::names::signal_name(signo))
            }
            Ending::Stopped { signo, sender, .. } => match sender {
                Some(pid) => format!(
                    "stopped by {} from pid {pid}",
                    crate::names::signal_name(signo)
                ),
                None => format!("stopped by {}", crate::names::signal_name(signo)),
            },
            Ending::Aborted { .. } => {
                "aborted by its framework (communicator aborted, then SIGABRT)".into()
            }
            Ending::Vanished { .. } => {
                "ended without any mark (SIGKILL, the OOM killer or a lost node)".into()
            }
        }
    }
}

/// How process `pm` ended.
pub fn of(pm: &ProcessModel) -> Ending {
    let signal = pm
        .signal
        .map(|s| {
            (
                s.signo,
                s.t,
                (s.code <= 0 && s.sender_pid != 0).then_some(s.sender_pid),
            )
        })
        .or_else(|| pm.signals.first().map(|&(s, t)| (s, t, None)));
    if let Some((signo, t, sender)) = signal {
        if is_termination_signal(signo) {
            return Ending::Stopped { signo, t, sender };
        }
        if signo == SIGABRT && gave_up_before(pm, t) {
            return Ending::Aborted { t };
        }
        return Ending::Crashed { signo, t };
    }
    if pm.clean_exit {
        return Ending::Exited {
            status: pm.exit_status,
            underscore: pm.exit_underscore(),
            t: pm.exit_t.unwrap_or(pm.last_t),
        };
    }
    if pm.alive {
        return Ending::Running;
    }
    Ending::Vanished {
        last_seen: pm.last_t.max(pm.last_alive.unwrap_or(0)),
    }
}

/// Whether the process aborted a communicator, or NCCL reported an error to it, before `t`:
/// an abort that follows is its framework giving up, not a crash of its own.
pub fn gave_up_before(pm: &ProcessModel, t: u64) -> bool {
    pm.calls.iter().any(|c| {
        c.t_enter <= t
            && (c.call == Some(CallId::NcclCommAbort) || (!c.is_cuda && c.reports_error()))
    })
}
