//! Timestamps for records (writer side; the reader's conversion back to CLOCK_MONOTONIC is
//! `ncclshim_format::timebase`).
//!
//! Two time bases, chosen once per process when the first dump is created:
//! - **TSC** (x86-64, when the CPU has an invariant TSC — `constant_tsc` and `nonstop_tsc` — and
//!   the kernel itself trusts it as its clocksource): `rdtsc`, ~10 ns. A call record takes two
//!   timestamps, so this halves what the recorder adds to every intercepted call.
//! - **CLOCK_MONOTONIC** everywhere else (vDSO, ~24 ns), or when `NCCLSHIM_CLOCK=monotonic`.
//!
//! A TSC dump carries the rate measured at creation and a small table of (TSC, MONOTONIC)
//! anchors refreshed as the process runs; the reader maps ticks to MONOTONIC nanoseconds
//! piecewise between anchors, so drift over a long job is bounded by the anchor spacing. The
//! header's calibration pair then maps MONOTONIC to wall-clock time, as for any dump.

use ncclshim_format::layout::{ClockAnchor, ClockPair};
pub use ncclshim_format::timebase::{ClockKind, TimeBase, ANCHORS};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const MONOTONIC: u8 = 1;
const TSC: u8 = 2;
static SELECTED: AtomicU8 = AtomicU8::new(UNDECIDED);

#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn tsc() -> u64 {
    monotonic_ns()
}

/// A record timestamp in this process's time base (see [`select`]).
#[inline]
pub fn now() -> u64 {
    if SELECTED.load(Ordering::Relaxed) == TSC {
        tsc()
    } else {
        monotonic_ns()
    }
}

/// Whether the CPU's TSC is invariant and the kernel uses it as its clocksource.
fn tsc_is_trustworthy() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    if source.trim() != "tsc" {
        return false;
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    has("constant_tsc") && has("nonstop_tsc")
}

/// What `NCCLSHIM_CLOCK` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Auto,
    Tsc,
    Monotonic,
}

/// Reads `NCCLSHIM_CLOCK` (`tsc`, `monotonic`, `auto`; unset or blank is `auto`), with the one
/// line to print when the value cannot be followed.
fn parse_choice(raw: Option<&str>) -> (Choice, Option<String>) {
    let Some(raw) = raw.filter(|v| !v.trim().is_empty()) else {
        return (Choice::Auto, None);
    };
    let shown = crate::settings::shown(raw);
    match raw.trim().to_ascii_lowercase().as_str() {
        "auto" => (Choice::Auto, None),
        "monotonic" => (Choice::Monotonic, None),
        "tsc" if cfg!(target_arch = "x86_64") => (Choice::Tsc, None),
        "tsc" => (
            Choice::Monotonic,
            Some(format!(
                "ncclshim: NCCLSHIM_CLOCK={shown}: this CPU has no TSC; using monotonic\n"
            )),
        ),
        _ => (
            Choice::Auto,
            Some(format!(
                "ncclshim: NCCLSHIM_CLOCK={shown} is not one of tsc, monotonic, auto; using auto\n"
            )),
        ),
    }
}

/// Decides the time base once per process (`NCCLSHIM_CLOCK=tsc|monotonic` overrides the
/// automatic choice); every later call returns the same answer.
pub fn select() -> ClockKind {
    match SELECTED.load(Ordering::Acquire) {
        TSC => return ClockKind::Tsc,
        MONOTONIC => return ClockKind::Monotonic,
        _ => {}
    }
    let raw =
        std::env::var_os(crate::settings::CLOCK.name).map(|v| v.to_string_lossy().into_owned());
    let (choice, why) = parse_choice(raw.as_deref());
    let use_tsc = match choice {
        Choice::Monotonic => false,
        Choice::Tsc => true,
        Choice::Auto => tsc_is_trustworthy(),
    };
    let v = if use_tsc { TSC } else { MONOTONIC };
    // The first decision wins if two threads race here; only its complaint is printed.
    if SELECTED
        .compare_exchange(UNDECIDED, v, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        crate::config::warn(why);
    }
    if SELECTED.load(Ordering::Acquire) == TSC {
        ClockKind::Tsc
    } else {
        ClockKind::Monotonic
    }
}

/// One (TSC, MONOTONIC) pair: the best of three, bracketed by TSC reads.
pub fn anchor() -> ClockAnchor {
    let mut best = (u64::MAX, ClockAnchor::default());
    for _ in 0..3 {
        let a = tsc();
        let m = monotonic_ns();
        let b = tsc();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (
                width,
                ClockAnchor {
                    seq: Default::default(),
                    tsc: a + width / 2,
                    monotonic_ns: m,
                },
            );
        }
    }
    best.1
}

/// TSC ticks per second, measured over about two milliseconds (once, when a TSC dump is created).
pub fn calibrate_tsc_hz() -> (u64, ClockAnchor, ClockAnchor) {
    let a = anchor();
    let deadline = a.monotonic_ns + 2_000_000;
    while monotonic_ns() < deadline {
        std::hint::spin_loop();
    }
    let b = anchor();
    let ticks = b.tsc.saturating_sub(a.tsc) as u128;
    let ns = b.monotonic_ns.saturating_sub(a.monotonic_ns).max(1) as u128;
    ((ticks * 1_000_000_000 / ns) as u64, a, b)
}

/// Best of three back-to-back (MONOTONIC, REALTIME, BOOTTIME) readings: the one whose
/// bracketing MONOTONIC reads were closest together.
pub fn calibrate() -> ClockPair {
    let mut best = ClockPair {
        uncertainty_ns: u64::MAX,
        ..ClockPair::default()
    };
    for _ in 0..3 {
        let before = monotonic_ns();
        let realtime = realtime_ns();
        let boottime = read(libc::CLOCK_BOOTTIME);
        let after = monotonic_ns();
        let width = after.saturating_sub(before);
        if width < best.uncertainty_ns {
            best = ClockPair {
                monotonic_ns: before + width / 2,
                realtime_ns: realtime,
                boottime_ns: boottime,
                uncertainty_ns: width,
            };
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_choices_and_the_line_for_a_bad_one() {
        assert_eq!(parse_choice(None), (Choice::Auto, None));
        assert_eq!(parse_choice(Some("")), (Choice::Auto, None));
        assert_eq!(parse_choice(Some(" Monotonic ")), (Choice::Monotonic, None));
        assert_eq!(
            parse_choice(Some("rdtsc")),
            (
                Choice::Auto,
                Some(
                    "ncclshim: NCCLSHIM_CLOCK=rdtsc is not one of tsc, monotonic, auto; using auto\n"
                        .into()
                )
            )
        );
        if cfg!(target_arch = "x86_64") {
            assert_eq!(parse_choice(Some("tsc")), (Choice::Tsc, None));
        }
    }

    #[test]
    fn monotonic_does_not_go_back_and_calibration_is_tight() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        let c = calibrate();
        assert!(c.uncertainty_ns < 1_000_000_000);
        assert!(c.realtime_ns > 1_600_000_000_000_000_000);
    }

    #[test]
    fn the_selected_clock_converts_back_to_monotonic() {
        let kind = select();
        let (hz, a, b) = calibrate_tsc_hz();
        let t = now();
        let m = monotonic_ns();
        let base = match kind {
            ClockKind::Tsc => {
                TimeBase::new(1, hz, &[(a.tsc, a.monotonic_ns), (b.tsc, b.monotonic_ns)]).unwrap()
            }
            ClockKind::Monotonic => TimeBase::Monotonic,
        };
        let converted = base.to_monotonic_ns(t);
        // A correctness bound (the conversion is right to well under a millisecond), not a speed one.
        assert!(
            converted.abs_diff(m) < 1_000_000,
            "{converted} vs {m} ({kind:?})"
        );
    }
}
