//! The terminal rendering of a [`Report`], one function per section in the order they are
//! printed: the job line, the first failure and those after it, the evidence gaps, the Flight
//! Recorder, the verdict, the findings, the communicators, the files that could not be read.
//!
//! How it is rendered (colours, every finding or the few that matter) is the reader's choice,
//! [`TextOptions`], passed here and never stored in the report: the report is the same whatever
//! the terminal, and its JSON has no such field.

use super::{CommSummary, CommTraffic, FailureLine, Report};
use crate::finding::words::{count, human_bytes, rank_list, ranks_named};
use crate::finding::{Finding, Severity};
// Every value the sections print may quote the dumps (error texts, environment, run ids,
// files): each goes through `safe`, so no recorded control character reaches the terminal.
use crate::terminal::escape_controls as safe;
use crate::terminal::Styles;

/// How many findings besides the primaries the text report shows (the rest behind `--all`).
pub const SHOWN_BESIDE_PRIMARY: usize = 3;

/// How the text report is rendered.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextOptions {
    /// Colours (SGR codes) for a terminal.
    pub color: bool,
    /// Every finding (`report --all`), not only the primary and the few that add to it
    /// ([`Report::shown_findings`]).
    pub all_findings: bool,
}

/// How many failures after the first, grouped by what happened, and how many evidence gaps the
/// text lists before "... N more".
const LISTED: usize = 8;

/// The styles of the text, plain without colour.
#[derive(Clone, Copy)]
struct Paint {
    color: bool,
}

impl Paint {
    fn paint(self, s: &str, f: fn(&str) -> String) -> String {
        if self.color {
            f(s)
        } else {
            s.to_owned()
        }
    }
    fn bold(self, s: &str) -> String {
        self.paint(s, |x| x.bold().to_string())
    }
    fn red(self, s: &str) -> String {
        self.paint(s, |x| x.red().bold().to_string())
    }
    fn yellow(self, s: &str) -> String {
        self.paint(s, |x| x.yellow().bold().to_string())
    }
    fn dim(self, s: &str) -> String {
        self.paint(s, |x| x.dimmed().to_string())
    }
}

impl Report {
    /// The terminal rendering, as `ncclshim report` prints it without options.
    pub fn to_text(&self, color: bool) -> String {
        self.to_text_with(TextOptions {
            color,
            all_findings: false,
        })
    }

    /// The terminal rendering, as `options` ask.
    pub fn to_text_with(&self, options: TextOptions) -> String {
        let p = Paint {
            color: options.color,
        };
        let mut o = String::new();
        self.job_line(p, &mut o);
        self.failures(p, &mut o);
        o.push('\n');
        self.gaps(p, &mut o);
        if let Some(fr) = &self.flight_recorder {
            o.push_str(&crate::flight_recorder::render_text(fr, &|s: &str| {
                p.bold(s)
            }));
        }
        self.no_problem_verdict(p, &mut o);
        self.findings_shown(p, options.all_findings, &mut o);
        self.communicators(p, &mut o);
        self.unread_files(p, &mut o);
        o
    }

    /// The findings the text report shows, in order, and how many it leaves out: every primary,
    /// then up to [`SHOWN_BESIDE_PRIMARY`] that add something (causes and conditions before
    /// advisories, consequences last); all of them with `all`.
    pub fn shown_findings(&self, all: bool) -> (Vec<&Finding>, usize) {
        if all {
            return (self.findings.iter().collect(), 0);
        }
        let mut shown: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Primary)
            .collect();
        let mut rest: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.severity != Severity::Primary)
            .collect();
        // Stable: the verdict's order within each group.
        rest.sort_by_key(|f| (f.consequence, f.severity == Severity::Advisory));
        let room = if shown.is_empty() {
            SHOWN_BESIDE_PRIMARY + 1
        } else {
            SHOWN_BESIDE_PRIMARY
        };
        let hidden = rest.len().saturating_sub(room);
        shown.extend(rest.into_iter().take(room));
        (shown, hidden)
    }

    /// `ncclshim report: 2 ranks, 2 processes on 1 host, 2 dumps`, the run note and the PyTorch
    /// backend.
    fn job_line(&self, p: Paint, o: &mut String) {
        let j = &self.job;
        // A job whose processes never joined a communicator has no ranks to count.
        let ranks = if j.ranks == 0 {
            String::new()
        } else {
            format!("{}, ", count(j.ranks as usize, "rank", "ranks"))
        };
        // Processes known only from Flight Recorder dumps name no host.
        let hosts = if j.hosts.is_empty() {
            "(hosts not recorded)".to_owned()
        } else {
            format!("on {}", count(j.hosts.len(), "host", "hosts"))
        };
        o.push_str(&p.bold(&format!(
            "ncclshim report: {ranks}{} {hosts}, {}{}",
            count(j.processes, "process", "processes"),
            count(j.dumps, "dump", "dumps"),
            if j.synthetic {
                " [SYNTHETIC dumps, not a real capture]"
            } else {
                ""
            }
        )));
        o.push('\n');
        if let Some(n) = &self.run_note {
            o.push_str(&p.yellow(&format!("note: {}", safe(n))));
            o.push('\n');
        }
        for b in &self.pytorch_backend {
            o.push_str(&format!("PyTorch backend: {}\n", safe(&b.text)));
        }
    }

    /// The first failure, the note on its order, and the failures after it.
    fn failures(&self, p: Paint, o: &mut String) {
        let Some(f) = &self.first_failure else {
            o.push_str("no call returned an error\n");
            return;
        };
        let who = match f.rank {
            Some(r) => format!("rank {r} ({} pid {})", safe(&f.host), f.pid),
            None => format!("{} pid {}", safe(&f.host), f.pid),
        };
        o.push_str(&format!(
            "{} {who}: {}\n",
            p.red("first failure:"),
            safe(&f.what)
        ));
        if let Some(n) = &self.ordering_note {
            o.push_str(&format!("  {}\n", p.yellow(&format!("note: {}", safe(n)))));
        }
        if self.failure_order.len() > 1 {
            o.push_str(&p.dim("then:"));
            o.push('\n');
            let groups = failure_groups(&self.failure_order[1..]);
            for g in groups.iter().take(LISTED) {
                let mut who = Vec::new();
                if !g.ranks.is_empty() {
                    let noun = if g.ranks.len() == 1 { "rank" } else { "ranks" };
                    who.push(format!("{noun} {}", rank_list(&g.ranks)));
                }
                who.extend(g.others.iter().cloned());
                o.push_str(&format!(
                    "  +{:.1} ms {}: {}\n",
                    g.after_first_ms,
                    who.join(", "),
                    safe(g.what)
                ));
            }
            if groups.len() > LISTED {
                o.push_str(&format!(
                    "  ... {} more kinds of failure\n",
                    groups.len() - LISTED
                ));
            }
        }
    }

    /// The gaps in the evidence, the first few of them.
    fn gaps(&self, p: Paint, o: &mut String) {
        if self.evidence_gaps.is_empty() {
            return;
        }
        o.push_str(&p.bold("Evidence gaps"));
        o.push('\n');
        for g in self.evidence_gaps.iter().take(LISTED) {
            o.push_str(&format!("  {}\n", safe(&g.text)));
        }
        if self.evidence_gaps.len() > LISTED {
            o.push_str(&format!(
                "  ... {} more\n",
                self.evidence_gaps.len() - LISTED
            ));
        }
        o.push('\n');
    }

    /// When no finding is about a problem: "No problem found", qualified by the gaps and the
    /// files that could not be read.
    fn no_problem_verdict(&self, p: Paint, o: &mut String) {
        if self.problem_findings().next().is_some() {
            return;
        }
        let verdict = match (self.evidence_gaps.is_empty(), self.problems.is_empty()) {
            (true, true) => "No problem found.".to_owned(),
            (false, true) => {
                "No problem found in what was recorded (the evidence has gaps: see above)."
                    .to_owned()
            }
            (gaps, false) => format!(
                "No problem found in the {} that could be read ({} could not: see below{}).",
                count(self.job.dumps, "dump", "dumps"),
                count(self.problems.len(), "file", "files"),
                if gaps {
                    "; the evidence has gaps: see above"
                } else {
                    ""
                }
            ),
        };
        o.push_str(&p.bold(&verdict));
        o.push('\n');
    }

    /// The findings shown ([`Report::shown_findings`]), and how many more `--all` lists.
    fn findings_shown(&self, p: Paint, all: bool, o: &mut String) {
        let (shown, hidden) = self.shown_findings(all);
        for f in shown {
            finding(p, f, o);
        }
        if hidden > 0 {
            o.push_str(&p.dim(&format!(
                "{} more (consequences, conditions, echoes): `ncclshim report --all` lists them; --json has every finding\n",
                count(hidden, "finding", "findings")
            )));
            o.push('\n');
        }
    }

    /// One line per communicator.
    fn communicators(&self, p: Paint, o: &mut String) {
        if self.job.communicators.is_empty() {
            return;
        }
        o.push_str(&p.bold("communicators:"));
        o.push('\n');
        for c in &self.job.communicators {
            o.push_str(&communicator_line(c));
            o.push('\n');
        }
    }

    /// The files that could not be read, and why.
    fn unread_files(&self, p: Paint, o: &mut String) {
        if self.problems.is_empty() {
            return;
        }
        o.push_str(&p.yellow(&format!(
            "{} could not be read:",
            count(self.problems.len(), "file", "files")
        )));
        o.push('\n');
        for x in &self.problems {
            o.push_str(&format!("  {}: {}\n", safe(&x.file), safe(&x.error)));
        }
    }
}

/// Failures after the first that say the same thing, said on one line.
struct FailureGroup<'a> {
    /// The first one's offset from the job's first failure.
    after_first_ms: f64,
    what: &'a str,
    ranks: Vec<u32>,
    /// Processes without a rank, as `host pid N`.
    others: Vec<String>,
}

/// The same failure on many ranks is one group, in the order each was first seen.
fn failure_groups(after_first: &[FailureLine]) -> Vec<FailureGroup<'_>> {
    let mut groups: Vec<FailureGroup> = Vec::new();
    for l in after_first {
        let g = match groups.iter_mut().position(|g| g.what == l.what) {
            Some(i) => &mut groups[i],
            None => {
                groups.push(FailureGroup {
                    after_first_ms: l.after_first_ms,
                    what: &l.what,
                    ranks: Vec::new(),
                    others: Vec::new(),
                });
                groups.last_mut().expect("just pushed")
            }
        };
        match l.rank {
            Some(r) => g.ranks.push(r),
            None => g.others.push(format!("{} pid {}", safe(&l.host), l.pid)),
        }
    }
    groups
}

/// One finding: severity, catalog entry, title and confidence, its ranks, evidence and remedy.
fn finding(p: Paint, f: &Finding, o: &mut String) {
    let sev = match f.severity {
        Severity::Primary => p.red("PRIMARY"),
        Severity::Contributing => p.yellow("CONTRIBUTING"),
        Severity::Advisory => p.bold("ADVISORY"),
    };
    let cat = f.catalog().map(|c| format!("[{c}] ")).unwrap_or_default();
    let conf = format!("{:?}", f.confidence).to_lowercase();
    o.push_str(&format!(
        "{sev} {cat}{} {}\n",
        p.bold(&safe(&f.title)),
        p.dim(&format!("(confidence {conf})"))
    ));
    if !f.ranks.is_empty() {
        o.push_str(&format!("  {}\n", ranks_named(&f.ranks)));
    }
    o.push_str("  evidence:\n");
    for e in &f.evidence {
        o.push_str(&format!("    - {}\n", safe(&e.text)));
    }
    o.push_str(&format!("  {} {}\n", p.bold("remedy:"), safe(&f.remedy)));
    if let Some(v) = &f.fixed_in {
        o.push_str(&format!("  fixed in NCCL {}\n", safe(v)));
    }
    o.push('\n');
}

/// A communicator: its hash and process group, its ranks present or missing, its traffic.
fn communicator_line(c: &CommSummary) -> String {
    let mut line = format!(
        "  {}{}: {}",
        c.comm_hash,
        c.process_group
            .as_ref()
            .map(|g| format!(" ({})", safe(g)))
            .unwrap_or_default(),
        count(c.nranks as usize, "rank", "ranks")
    );
    if c.ranks_missing.is_empty() {
        line.push_str(if c.nranks == 1 {
            ", present"
        } else {
            ", all present"
        });
    } else {
        line.push_str(&format!(
            "; present: {}; missing: {}",
            if c.ranks_present.is_empty() {
                "none".to_owned()
            } else {
                ranks_named(&c.ranks_present)
            },
            ranks_named(&c.ranks_missing)
        ));
    }
    if let Some(t) = &c.traffic {
        line.push_str(&traffic_text(t));
    }
    line
}

/// `; 12 operations, 4.0 MiB per rank, busbw ...`: what a communicator's traffic was.
fn traffic_text(t: &CommTraffic) -> String {
    let mut s = format!(
        "; {} operations{}, {} per rank",
        if t.ops_min == t.ops_max {
            t.ops_max.to_string()
        } else {
            format!("{}-{}", t.ops_min, t.ops_max)
        },
        if t.ops_min < t.ops_max {
            " (ranks differ)"
        } else {
            ""
        },
        human_bytes(t.bytes_max)
    );
    // A bandwidth of 0 means no kernel time was measured: say nothing.
    if let Some(b) = t.busbw_gbps.as_ref().filter(|b| b.max > 0.0) {
        // Small test jobs move a few KiB per operation, and a hang stretches an
        // operation to seconds: in GB/s those read 0.00. One unit for the line,
        // the largest in which its fastest rank is at least 1.
        let (scale, unit) = [(1.0, "GB/s"), (1e3, "MB/s"), (1e6, "KB/s")]
            .into_iter()
            .find(|(scale, _)| b.max * scale >= 1.0)
            .unwrap_or((1e9, "B/s"));
        s.push_str(&format!(
            ", busbw {:.2} {unit} median ({:.2} on rank {}, {:.2} on rank {})",
            b.median * scale,
            b.min * scale,
            b.min_rank,
            b.max * scale,
            b.max_rank
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::TextOptions;
    use crate::finding::{registry, Confidence, Finding, Severity};
    use crate::rules::testutil::analyze;

    /// A report with a primary and five other findings.
    fn report() -> crate::report::Report {
        let (job, _) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.init_world(22703);
        });
        let findings = (0..6)
            .map(|i| {
                let mut f = Finding::new(
                    &registry::LATE_RANK,
                    format!("finding {i}"),
                    Confidence::High,
                );
                f.severity = if i == 0 {
                    Severity::Primary
                } else {
                    Severity::Contributing
                };
                f
            })
            .collect();
        crate::report::Report::build(
            &job,
            &crate::story::Story::build(&job),
            findings,
            Default::default(),
        )
    }

    /// `report --all` is how the text is rendered, not a field set on the built report: the
    /// same report shows the primary and three more, or every finding.
    #[test]
    fn every_finding_is_a_rendering_option() {
        let r = report();
        let some = r.to_text(false);
        for i in 0..4 {
            assert!(some.contains(&format!("finding {i}")), "{some}");
        }
        assert!(!some.contains("finding 4"), "{some}");
        assert!(some.contains("2 findings more"), "{some}");
        let all = r.to_text_with(TextOptions {
            color: false,
            all_findings: true,
        });
        for i in 0..6 {
            assert!(all.contains(&format!("finding {i}")), "{all}");
        }
        assert!(!all.contains("--all"), "{all}");
        // The default rendering is the one without options.
        assert_eq!(r.to_text_with(TextOptions::default()), some);
    }
}
