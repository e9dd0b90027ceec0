//! Which Flight Recorder dumps belong to the run being reported. A reused dump directory keeps
//! `fr/rank_*` of earlier runs (PyTorch overwrites a rank's file only when that rank dumps
//! again), and an old dump joined with today's run becomes its "first failure" a day early,
//! with version mismatches and missing ranks that are not there. A dump belongs to the run
//! when its time (its latest entry, else the file's modification time: PyTorch writes it once,
//! when it dumps) falls from a little before the run's first record until the next run of the
//! directory began; any other is listed as another run's and not joined. Only dumps found in the
//! job directory are judged so: those named with `--flight-recorder` are the user's choice.

use super::dumps::RankDump;
use crate::runs::RunSummary;
use std::path::Path;

/// How far before the run's first record a dump's latest entry may lie and still be the run's:
/// clock skew between hosts under NTP is milliseconds; a Flight Recorder entry is created for
/// a collective, after the communicator's creation that the shim recorded first.
const BEFORE_THE_RUN_NS: u64 = 60_000_000_000;

/// The wall-clock span (ns since the epoch) a run's Flight Recorder dumps fall in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunWindow {
    /// The run's first record.
    pub from_ns: u64,
    /// The next run of the directory began here (runs that overlap this one give no end).
    pub until_ns: Option<u64>,
}

impl RunWindow {
    /// The window of run `chosen` among the directory's runs; `None` when the run has no time
    /// (nothing readable), so that every dump is taken as before.
    pub fn of(runs: &[RunSummary], chosen: usize) -> Option<Self> {
        let run = runs.get(chosen)?;
        if run.first_t_unix_ns == 0 {
            return None;
        }
        let until_ns = runs
            .iter()
            .map(|r| r.first_t_unix_ns)
            .filter(|&t| t > run.last_t_unix_ns.max(run.first_t_unix_ns))
            .min();
        Some(Self {
            from_ns: run.first_t_unix_ns,
            until_ns,
        })
    }

    /// `None` when a dump of time `t` belongs to the run, else why not, in words.
    pub fn outside(&self, t: u64) -> Option<String> {
        if t + BEFORE_THE_RUN_NS < self.from_ns {
            return Some(format!(
                "{} before this run began",
                span_text(self.from_ns - t)
            ));
        }
        match self.until_ns {
            Some(until) if t >= until => Some(format!(
                "{} after this run ended, when a later run of the directory had begun",
                span_text(t - until)
            )),
            _ => None,
        }
    }

    /// Why the file at `path` is another run's, by its modification time (no read).
    pub fn file_outside(&self, path: &Path) -> Option<String> {
        let modified = std::fs::metadata(path).ok()?.modified().ok()?;
        let t = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
        self.outside(u64::try_from(t.as_nanos()).ok()?)
            .map(|why| format!("written {why}"))
    }

    /// Why a read dump is another run's, by its latest entry.
    pub fn dump_outside(&self, d: &RankDump) -> Option<String> {
        self.outside(latest_entry_ns(d)?)
            .map(|why| format!("its latest entry is {why}"))
    }
}

/// The latest time any entry of the dump names (created, seen started, seen completed).
fn latest_entry_ns(d: &RankDump) -> Option<u64> {
    d.entries
        .iter()
        .flat_map(|e| {
            [
                e.time_created_ns,
                e.time_discovered_started_ns,
                e.time_discovered_completed_ns,
            ]
        })
        .flatten()
        .filter(|&t| t > 0)
        .max()
        .map(|t| t as u64)
}

/// `22 h`, `35 min`, `3 days`: how far apart, roughly.
fn span_text(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    // Rounded to the nearest unit: 21 h 59 min reads "22 h".
    let nearest = |unit: u64| (s + unit / 2) / unit;
    match s {
        0..120 => format!("{s} s"),
        120..7_200 => format!("{} min", nearest(60)),
        7_200..172_800 => format!("{} h", nearest(3_600)),
        _ => format!("{} days", nearest(86_400)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000_000_000;

    fn run(first: u64, last: u64) -> RunSummary {
        RunSummary {
            id: String::new(),
            source: String::new(),
            processes: 1,
            hosts: 1,
            first_t_unix_ns: first,
            last_t_unix_ns: last,
            reported: false,
            attempt: None,
        }
    }

    #[test]
    fn a_dump_of_the_day_before_is_another_runs() {
        let w = RunWindow::of(&[run(100 * H, 101 * H)], 0).unwrap();
        assert_eq!(
            w.outside(78 * H).as_deref(),
            Some("22 h before this run began")
        );
        assert_eq!(w.outside(100 * H + H / 2), None);
        // Written long after the run's last record (a hung job's watchdog): still the run's.
        assert_eq!(w.outside(130 * H), None);
    }

    #[test]
    fn a_later_run_ends_the_window_of_an_earlier_one() {
        let runs = [run(10 * H, 11 * H), run(20 * H, 21 * H)];
        let first = RunWindow::of(&runs, 0).unwrap();
        assert_eq!(first.until_ns, Some(20 * H));
        assert!(first.outside(20 * H + 1).is_some());
        assert!(first.outside(15 * H).is_none());
        assert_eq!(RunWindow::of(&runs, 1).unwrap().until_ns, None);
        // Runs that overlap give no end to each other.
        let overlapping = [run(10 * H, 21 * H), run(20 * H, 22 * H)];
        assert_eq!(RunWindow::of(&overlapping, 0).unwrap().until_ns, None);
    }

    #[test]
    fn a_run_without_time_takes_every_dump() {
        assert_eq!(RunWindow::of(&[run(0, 0)], 0), None);
    }
}
