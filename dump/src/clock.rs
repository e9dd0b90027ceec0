//! Timestamps for records, and how to turn them back into CLOCK_MONOTONIC nanoseconds.
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

use crate::layout::{ClockAnchor, ClockPair, CLOCK_ANCHORS};
use std::sync::atomic::{AtomicU8, Ordering};

/// The time base of a dump's record timestamps (`FileHeader::clock_kind`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// CLOCK_MONOTONIC nanoseconds.
    Monotonic = 0,
    /// Raw time-stamp counter ticks.
    Tsc = 1,
}

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
    match raw.trim().to_ascii_lowercase().as_str() {
        "auto" => (Choice::Auto, None),
        "monotonic" => (Choice::Monotonic, None),
        "tsc" if cfg!(target_arch = "x86_64") => (Choice::Tsc, None),
        "tsc" => (
            Choice::Monotonic,
            Some(format!(
                "ncclshim: NCCLSHIM_CLOCK={raw}: this CPU has no TSC; using monotonic\n"
            )),
        ),
        _ => (
            Choice::Auto,
            Some(format!(
                "ncclshim: NCCLSHIM_CLOCK={raw} is not one of tsc, monotonic, auto; using auto\n"
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
    let raw = std::env::var_os("NCCLSHIM_CLOCK").map(|v| v.to_string_lossy().into_owned());
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

/// Converts a dump's record timestamps to CLOCK_MONOTONIC nanoseconds (reader side).
#[derive(Debug, Clone, PartialEq)]
pub enum TimeBase {
    Monotonic,
    Tsc {
        /// (ticks, monotonic ns), sorted by ticks, implausible ones removed.
        anchors: Vec<(u64, u64)>,
        /// Nanoseconds per tick from the creation-time calibration.
        ns_per_tick: f64,
    },
}

/// Anchors closer together than this many nanoseconds give a noisy slope; the calibrated rate
/// is used across them instead.
const MIN_SEGMENT_NS: f64 = 50e6;

impl TimeBase {
    /// Builds the converter from a header's kind, rate and anchors. `None` for an unknown kind
    /// or a TSC dump without a usable rate.
    pub fn new(kind: u32, tsc_hz: u64, raw: &[(u64, u64)]) -> Option<Self> {
        match kind {
            0 => Some(Self::Monotonic),
            1 if tsc_hz > 0 => {
                let ns_per_tick = 1e9 / tsc_hz as f64;
                let mut anchors: Vec<(u64, u64)> = raw
                    .iter()
                    .copied()
                    .filter(|&(t, m)| t != 0 && m != 0)
                    .collect();
                anchors.sort_unstable();
                anchors.dedup_by_key(|a| a.0);
                // Keep anchors consistent with the calibrated rate (within 1%) relative to the
                // first one: a torn or bogus pair must not bend the whole time line.
                if let Some(&(t0, m0)) = anchors.first() {
                    anchors.retain(|&(t, m)| {
                        let dt = (t - t0) as f64 * ns_per_tick;
                        let dm = m as f64 - m0 as f64;
                        dt < 1e6 || ((dm - dt) / dt).abs() < 0.01
                    });
                }
                if anchors.is_empty() {
                    return None;
                }
                Some(Self::Tsc {
                    anchors,
                    ns_per_tick,
                })
            }
            _ => None,
        }
    }

    /// The CLOCK_MONOTONIC nanoseconds of a record timestamp.
    pub fn to_monotonic_ns(&self, t: u64) -> u64 {
        let Self::Tsc {
            anchors,
            ns_per_tick,
        } = self
        else {
            return t;
        };
        // The last anchor at or before t (or the first one, extrapolating backwards).
        let i = anchors.partition_point(|a| a.0 <= t).saturating_sub(1);
        let (ta, ma) = anchors[i];
        let rate = anchors[i + 1..]
            .iter()
            .find(|b| (b.0 - ta) as f64 * ns_per_tick >= MIN_SEGMENT_NS)
            .map(|&(tb, mb)| (mb as f64 - ma as f64) / (tb - ta) as f64)
            .unwrap_or(*ns_per_tick);
        let ns = ma as f64 + (t as f64 - ta as f64) * rate;
        ns.max(0.0) as u64
    }
}

/// Number of anchors a header holds (re-exported for the reader).
pub const ANCHORS: usize = CLOCK_ANCHORS;

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
    fn tsc_conversion_interpolates_between_anchors() {
        // 2 GHz: 2 ticks per ns. The second segment runs 0.1% fast.
        let anchors = [
            (1_000, 500),
            (2_000_001_000, 1_000_000_500),
            (4_000_001_000, 2_001_000_500),
        ];
        let tb = TimeBase::new(1, 2_000_000_000, &anchors).unwrap();
        assert_eq!(tb.to_monotonic_ns(1_000), 500);
        assert_eq!(tb.to_monotonic_ns(1_000_001_000), 500_000_500);
        assert_eq!(tb.to_monotonic_ns(3_000_001_000), 1_500_500_500);
        // Before the first anchor: extrapolated with the first segment's rate.
        assert_eq!(tb.to_monotonic_ns(0), 0);
        // After the last: the calibrated rate.
        assert_eq!(tb.to_monotonic_ns(4_000_003_000), 2_001_001_500);
    }

    #[test]
    fn bogus_anchors_are_ignored_and_unknown_kinds_refused() {
        let anchors = [
            (1_000, 500),
            (2_000_001_000, 1_000_000_500),
            (3_000_000_000, 7),
        ];
        let tb = TimeBase::new(1, 2_000_000_000, &anchors).unwrap();
        assert_eq!(tb.to_monotonic_ns(2_000_001_000), 1_000_000_500);
        assert!(TimeBase::new(1, 0, &anchors).is_none());
        assert!(TimeBase::new(9, 1, &anchors).is_none());
        assert_eq!(TimeBase::new(0, 0, &[]).unwrap().to_monotonic_ns(42), 42);
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
