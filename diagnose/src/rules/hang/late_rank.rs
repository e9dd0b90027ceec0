//! A rank late to its communicator's collectives, in a job that otherwise works: the straggler
//! that makes every step as slow as itself.
//!
//! Why the late rank shows the SHORTEST time in collectives: a collective's kernel starts on each
//! rank when that rank launches it, but cannot finish anywhere before every rank has arrived
//! (ring and tree steps need each peer's data; NCCL's kernels of one collective end together).
//! So each rank's GPU time in the collective is (arrival of the last rank − its own arrival) +
//! the transfer itself: the early ranks' time includes waiting, the last rank's does not. NCCL's
//! maintainers say so directly: "the GPU which has the smallest time is the one which arrived the
//! last in the allreduce and the GPU which has the highest time was the first, and had to wait for
//! others" (NVIDIA/nccl#460); trace tools find stragglers the same way (lowest wait time,
//! arrived last). A rank with a high *apparent* bandwidth and its peers low is therefore the one
//! to debug — its compute, data loading, GPU clocks or host — not the network.
//!
//! The measure is the profiler plugin's running aggregates (GPU time per operation over the whole
//! job, never lost to wrap), compared per communicator between ranks doing the same operations.
//! Thresholds (`knowledge/thresholds.toml` `[late_rank]`) keep ordinary spread from counting.
//! Advisory: a contributing finding that explains no failure, so never the primary one.

use crate::finding::registry;
use crate::finding::words::rank_list;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::thresholds::thresholds;
use crate::model::JobModel;

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn ms(ns: f64) -> String {
    format!("{:.3} ms", ns / 1e6)
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let t = &thresholds().late_rank;
    let mut out = Vec::new();
    for &comm in job.comms.keys() {
        let members = job.comm_members(comm);
        let aggs = job.comm_aggregates(comm);
        if members.len() < 2 || aggs.len() != members.len() {
            continue;
        }
        // (rank, process, mean GPU ns per operation, busbw)
        let per_rank: Vec<(u32, usize, f64, Option<f64>)> = aggs
            .iter()
            .filter(|(_, _, a)| a.totals.timed_count >= t.min_ops)
            .filter_map(|(r, p, a)| Some((*r, *p, a.mean_gpu_ns()?, a.busbw_gbps())))
            .collect();
        if per_rank.len() != members.len() {
            continue;
        }
        let late: Vec<(u32, usize, f64, f64)> = per_rank
            .iter()
            .filter_map(|&(r, p, mean, _)| {
                let others = median(per_rank.iter().filter(|o| o.0 != r).map(|o| o.2).collect())?;
                (mean <= t.max_ratio * others && others - mean >= t.min_wait_ns as f64)
                    .then_some((r, p, mean, others))
            })
            .collect();
        // Most ranks "late" is no straggler: it is one early rank (or a spread with no outlier).
        if late.is_empty() || late.len() * 2 >= per_rank.len() {
            continue;
        }
        let late_ranks: Vec<u32> = late.iter().map(|l| l.0).collect();
        let late_ps: Vec<usize> = late.iter().map(|l| l.1).collect();
        let waiting: Vec<&(u32, usize, f64, Option<f64>)> = per_rank
            .iter()
            .filter(|x| !late_ranks.contains(&x.0))
            .collect();
        let waiting_ps: Vec<usize> = waiting.iter().map(|w| w.1).collect();
        let wait_median = median(waiting.iter().map(|w| w.2).collect()).unwrap_or(0.0);
        let late_mean = median(late.iter().map(|l| l.2).collect()).unwrap_or(0.0);
        // A whole host late (all of this communicator's ranks there, and only those): name it.
        let hosts_of = |ps: &[usize]| -> std::collections::BTreeSet<String> {
            ps.iter().map(|&p| job.processes[p].host.clone()).collect()
        };
        let late_hosts = hosts_of(&late_ps);
        let whole_host = late_hosts.len() == 1 && hosts_of(&waiting_ps).is_disjoint(&late_hosts);
        let (noun, verb) = if late_ranks.len() == 1 {
            ("Rank", "is")
        } else {
            ("Ranks", "are")
        };
        let who = match late_hosts.iter().next().filter(|_| whole_host) {
            Some(h) => format!("{noun} {} (all of host {h})", rank_list(&late_ranks)),
            None => format!("{noun} {}", rank_list(&late_ranks)),
        };
        let mut f = Finding::new(&registry::LATE_RANK,
            format!(
                "{who} {verb} late to the collectives of communicator {comm:#x}: {} of GPU time per operation against {} on the other ranks, which wait for {}",
                ms(late_mean),
                ms(wait_median),
                if late_ranks.len() == 1 { "it" } else { "them" },
            ),
            Confidence::Medium,
        )
        .remedy(
            "The late rank(s) arrive last at each collective, so everyone runs at their pace; \
             their short time inside NCCL means the delay is before the call, not in the network. \
             Profile the late rank's step outside NCCL (data loading, CPU contention, an uneven \
             share of work, GPU clocks or thermal throttling: nvidia-smi -q -d PERFORMANCE) and \
             compare its host with the others.",
        );
        // The finding is about the late ranks; the waiting ones are evidence, not its subject
        // (so it is never taken for the story of a waiting rank's failure).
        for &p in &late_ps {
            f.involve(job, p);
        }
        for &(r, p, mean, others) in &late {
            let a = job.processes[p].aggregate(comm);
            f.fact(
                Evidence::new(
                    EvidenceKind::Progress,
                    format!(
                        "comm {comm:#x}: {} of GPU time per operation, {:.0}% of the other ranks' median {} (arrives last, waits least)",
                        ms(mean),
                        100.0 * mean / others,
                        ms(others)
                    ),
                )
                .value("comm", format!("{comm:#x}"))
                .value("rank", r)
                .value("mean_gpu_ns", mean.round() as u64)
                .value("others_median_gpu_ns", others.round() as u64)
                .value("ops_timed", a.map(|a| a.totals.timed_count))
                .value("busbw_gbps", a.and_then(|a| a.busbw_gbps()))
                .of(job, p),
            );
        }
        // The waiting ranks as one fact: their spread, not one line per rank.
        let min = waiting.iter().map(|w| w.2).fold(f64::INFINITY, f64::min);
        let max = waiting.iter().map(|w| w.2).fold(0.0, f64::max);
        f.fact(
            Evidence::new(
                EvidenceKind::Progress,
                format!(
                    "comm {comm:#x}: {} of GPU time per operation (median; {} to {}): waiting for the late rank(s)",
                    ms(wait_median),
                    ms(min),
                    ms(max)
                ),
            )
            .value("comm", format!("{comm:#x}"))
            .value("median_gpu_ns", wait_median.round() as u64)
            .value("min_gpu_ns", min.round() as u64)
            .value("max_gpu_ns", max.round() as u64)
            .of_all(job, &waiting_ps),
        );
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::finding::registry;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::WORLD_UID;

    /// Ranks whose mean GPU time per AllReduce is `gpu_us[rank]` µs, over `ops` operations.
    fn job(hosts: &[&str], gpu_us: &[u64], ops: u64) -> Vec<crate::finding::Finding> {
        job_and_findings(hosts, gpu_us, ops).1
    }

    fn job_and_findings(
        hosts: &[&str],
        gpu_us: &[u64],
        ops: u64,
    ) -> (crate::model::JobModel, Vec<crate::finding::Finding>) {
        let n = gpu_us.len() as i32;
        analyze(hosts, |s| {
            s.snapshot_all(22803);
            s.init_world(22803);
            for r in s.ranks.iter_mut() {
                let us = gpu_us[r.rank as usize];
                r.prof_aggregates(WORLD_UID, n, r.rank as i32, ops, ops, 1 << 20, us * 1000);
                r.clean_exit();
            }
        })
    }

    /// An advisory alone is not a problem: the report of a job that ran with a late rank
    /// exits 0 and says no problem was found, then shows the advisory.
    #[test]
    fn a_late_rank_alone_does_not_fail_the_report() {
        let (jm, fs) = job_and_findings(&["n0", "n0", "n1", "n1"], &[900, 880, 120, 910], 1000);
        assert!(
            fs.iter()
                .all(|f| f.severity == crate::finding::Severity::Advisory),
            "{fs:?}"
        );
        let report = crate::report::Report::build(
            &jm,
            &crate::story::Story::build(&jm),
            fs,
            Default::default(),
        );
        assert_eq!(report.exit_code(), 0);
        let text = report.to_text(false);
        assert!(text.contains("No problem found"), "{text}");
        assert!(text.contains("ADVISORY"), "{text}");
    }

    #[test]
    fn the_rank_with_the_shortest_time_in_collectives_is_the_late_one() {
        let fs = job(&["n0", "n0", "n1", "n1"], &[900, 880, 120, 910], 1000);
        let f = find(&fs, registry::LATE_RANK.id()).expect("late rank");
        assert_eq!(f.severity, crate::finding::Severity::Advisory);
        assert!(f.title.starts_with("Rank 2 is late"), "{}", f.title);
        assert_eq!(f.ranks, vec![2], "the late rank is the subject");
        let late = f
            .evidence
            .iter()
            .find(|e| e.values.contains_key("others_median_gpu_ns"))
            .expect("the late rank's fact");
        assert_eq!(late.ranks, vec![2]);
        assert_eq!(late.values["mean_gpu_ns"], 120_000);
        let waiting = f
            .evidence
            .iter()
            .find(|e| e.values.contains_key("median_gpu_ns"))
            .expect("one fact for the waiting ranks");
        assert_eq!(waiting.ranks, vec![0, 1, 3]);
        assert_eq!(fs.len(), 1, "nothing else: {fs:?}");
    }

    /// The text report's communicator line carries the operations, bytes and bandwidth spread.
    #[test]
    fn the_text_report_shows_each_communicators_traffic() {
        let (job, fs) = analyze(&["n0", "n0"], |s| {
            s.snapshot_all(22803);
            s.init_world(22803);
            for r in s.ranks.iter_mut() {
                let ops = 1000 + u64::from(r.rank);
                r.prof_aggregates(WORLD_UID, 2, r.rank as i32, ops, ops, 1 << 20, 500_000);
                r.clean_exit();
            }
        });
        let text = crate::report::Report::build(
            &job,
            &crate::story::Story::build(&job),
            fs,
            Default::default(),
        )
        .to_text(false);
        let line = text
            .lines()
            .find(|l| l.contains("operations"))
            .unwrap_or_else(|| panic!("no traffic line in:\n{text}"));
        assert!(
            line.contains("1000-1001 operations (ranks differ), 1001.0 MiB per rank"),
            "{line}"
        );
        assert!(line.contains("busbw 2.10 GB/s median"), "{line}");
    }

    #[test]
    fn a_whole_late_host_is_named() {
        let fs = job(
            &["n0", "n0", "n1", "n1", "n2", "n2"],
            &[900, 900, 100, 110, 905, 880],
            500,
        );
        let f = find(&fs, registry::LATE_RANK.id()).expect("late host");
        assert!(
            f.title.contains("Ranks 2-3 (all of host n1)")
                || f.title.contains("Ranks 2, 3 (all of host n1)")
                || f.title.contains("(all of host n1)"),
            "{}",
            f.title
        );
    }

    #[test]
    fn ordinary_spread_few_operations_or_one_early_rank_is_nothing() {
        // Within the spread the threshold allows.
        assert!(find(
            &job(&["n0"; 4], &[900, 700, 600, 850], 1000),
            registry::LATE_RANK.id()
        )
        .is_none());
        // Too few operations to judge.
        assert!(find(
            &job(&["n0"; 4], &[900, 880, 120, 910], 10),
            registry::LATE_RANK.id()
        )
        .is_none());
        // One rank early (it waits for all the others): the others are not all "late".
        assert!(find(
            &job(&["n0"; 4], &[900, 100, 120, 110], 1000),
            registry::LATE_RANK.id()
        )
        .is_none());
        // A tiny absolute difference is launch jitter, not a straggler.
        assert!(find(
            &job(&["n0"; 4], &[90, 88, 12, 91], 1000),
            registry::LATE_RANK.id()
        )
        .is_none());
    }
}
