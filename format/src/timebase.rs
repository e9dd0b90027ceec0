//! The time bases of a dump's record timestamps, and how the reader turns them back into
//! CLOCK_MONOTONIC nanoseconds: `FileHeader::clock_kind` says which base a file uses; a TSC
//! file carries its calibrated rate and a table of (TSC, MONOTONIC) anchors, mapped piecewise
//! here so that drift over a long job is bounded by the anchor spacing. The writer side (which
//! clock to read, calibration, anchors) is `ncclshim_dump::clock`.

use crate::layout::CLOCK_ANCHORS;

/// The time base of a dump's record timestamps (`FileHeader::clock_kind`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// CLOCK_MONOTONIC nanoseconds.
    Monotonic = 0,
    /// Raw time-stamp counter ticks.
    Tsc = 1,
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
        /// Per anchor: its ticks and nanoseconds as `f64` and the rate (ns per tick) used from
        /// it on, computed once here rather than per record: a dump converts thousands of
        /// timestamps with the same few anchors.
        segments: Vec<(f64, f64, f64)>,
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
                let segments = (0..anchors.len())
                    .map(|i| {
                        let (ta, ma) = anchors[i];
                        (ta as f64, ma as f64, segment_rate(&anchors, i, ns_per_tick))
                    })
                    .collect();
                Some(Self::Tsc {
                    anchors,
                    ns_per_tick,
                    segments,
                })
            }
            _ => None,
        }
    }

    /// The CLOCK_MONOTONIC nanoseconds of a record timestamp.
    pub fn to_monotonic_ns(&self, t: u64) -> u64 {
        let Self::Tsc {
            anchors, segments, ..
        } = self
        else {
            return t;
        };
        // The last anchor at or before t (or the first one, extrapolating backwards).
        let i = anchors.partition_point(|a| a.0 <= t).saturating_sub(1);
        let (ta, ma, rate) = segments[i];
        let ns = ma + (t as f64 - ta) * rate;
        ns.max(0.0) as u64
    }
}

/// The rate from anchor `i` on: the slope to the first later anchor at least
/// [`MIN_SEGMENT_NS`] away, or the calibrated rate when there is none.
fn segment_rate(anchors: &[(u64, u64)], i: usize, ns_per_tick: f64) -> f64 {
    let (ta, ma) = anchors[i];
    anchors[i + 1..]
        .iter()
        .find(|b| (b.0 - ta) as f64 * ns_per_tick >= MIN_SEGMENT_NS)
        .map(|&(tb, mb)| (mb as f64 - ma as f64) / (tb - ta) as f64)
        .unwrap_or(ns_per_tick)
}

/// Number of anchors a header holds.
pub const ANCHORS: usize = CLOCK_ANCHORS;

#[cfg(test)]
mod tests {
    use super::*;

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
}
