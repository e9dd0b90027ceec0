//! Timestamps for records. Records use CLOCK_MONOTONIC (vDSO, ~24 ns, immune to NTP steps); the
//! header keeps a calibration pair so the reader can place them on the wall clock and line up
//! ranks from different hosts.

use crate::layout::ClockPair;

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

/// CLOCK_MONOTONIC in nanoseconds: the time base of every record.
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
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
    fn monotonic_does_not_go_back_and_calibration_is_tight() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        let c = calibrate();
        assert!(c.uncertainty_ns < 1_000_000_000);
        assert!(c.realtime_ns > 1_600_000_000_000_000_000);
    }
}
