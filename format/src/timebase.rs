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
        self.cursor().to_monotonic_ns(t)
    }

    /// A converter for many timestamps in a row that remembers the last anchor segment it used.
    pub fn cursor(&self) -> TimeCursor<'_> {
        TimeCursor {
            base: self,
            segment: 0,
        }
    }
}

/// Converts a run of timestamps (a ring's records, in order) with the same result as
/// [`TimeBase::to_monotonic_ns`], starting each search at the previous timestamp's segment:
/// consecutive records almost always fall in the same one, and the binary search over the
/// anchors was about half of the instructions spent decoding a slot.
#[derive(Debug, Clone)]
pub struct TimeCursor<'a> {
    base: &'a TimeBase,
    segment: usize,
}

impl TimeCursor<'_> {
    /// The CLOCK_MONOTONIC nanoseconds of a record timestamp.
    #[inline]
    pub fn to_monotonic_ns(&mut self, t: u64) -> u64 {
        let TimeBase::Tsc {
            anchors, segments, ..
        } = self.base
        else {
            return t;
        };
        // The segment is the last anchor at or before t (or the first one, extrapolating
        // backwards): the remembered one still is when t lies between it and the next anchor.
        let i = self.segment;
        let still = (i == 0 || anchors[i].0 <= t) && anchors.get(i + 1).is_none_or(|b| t < b.0);
        if !still {
            self.segment = anchors.partition_point(|a| a.0 <= t).saturating_sub(1);
        }
        let (ta, ma, rate) = segments[self.segment];
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

    #[test]
    fn a_cursor_converts_any_order_of_timestamps_like_a_fresh_search() {
        // Four segments 1e9 ticks apart at 2 GHz, each running a little fast.
        let anchors: Vec<(u64, u64)> = (0..4u64)
            .map(|i| (1_000 + i * 1_000_000_000, 500 + i * 500_100_000))
            .collect();
        let tb = TimeBase::new(1, 2_000_000_000, &anchors).unwrap();
        let TimeBase::Tsc { segments, .. } = &tb else {
            unreachable!()
        };
        // The search the cursor shortcuts: the last anchor at or before t, else the first.
        let searched = |t: u64| {
            let i = anchors.partition_point(|a| a.0 <= t).saturating_sub(1);
            let (ta, ma, rate) = segments[i];
            (ma + (t as f64 - ta) * rate).max(0.0) as u64
        };
        // Rising (a ring in order), falling, jumping across segments, before the first anchor,
        // after the last, and exactly on anchors.
        let mut times: Vec<u64> = (0..50).map(|i| i * 97_000_000).collect();
        times.extend(times.clone().iter().rev());
        times.extend([
            0,
            3_500_000_000,
            1_000,
            2_000_001_000,
            999,
            5_000_000_000,
            1_000_001_000,
        ]);
        let mut cursor = tb.cursor();
        for t in times {
            assert_eq!(cursor.to_monotonic_ns(t), searched(t), "t = {t}");
        }
    }
}
