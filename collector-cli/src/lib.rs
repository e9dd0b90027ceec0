//! The `ncclshim` CLI as a library: reading a job's dumps ([`load`]), the per-process and
//! cross-rank model ([`model`]), the rule set built from the failure catalog ([`rules`]), the
//! report ([`report`]), the raw `dump` view ([`dumpjson`]) and synthetic job dumps for tests and
//! benchmarks ([`synth`]).

pub mod doctor;
pub mod dumpjson;
pub mod knowledge;
pub mod load;
pub mod model;
pub mod names;
pub mod profnames;
pub mod report;
pub mod rules;
pub mod run;
pub mod runs;
pub mod scenarios;
pub mod synth;
pub mod trace;

use std::path::Path;

/// Reads every dump under `dir` and returns the report (problems included). `progress` is
/// ticked once per file read.
pub fn analyze_dir(
    dir: &Path,
    progress: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<report::Report> {
    analyze_run(dir, progress, None)
}

/// As [`analyze_dir`], about one run of the directory: the one `run` names (see
/// [`runs::choose`]), else the most recent. When the directory holds several runs the report
/// lists them and says which one it is about.
pub fn analyze_run(
    dir: &Path,
    progress: Option<&indicatif::ProgressBar>,
    run: Option<&str>,
) -> anyhow::Result<report::Report> {
    let (mut runs, problems) = read_runs(dir, progress)?;
    let chosen = runs::choose(&runs, run).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    runs[chosen].summary.reported = true;
    let summaries: Vec<runs::RunSummary> = runs.iter().map(|r| r.summary.clone()).collect();
    let parts = std::mem::take(&mut runs[chosen].parts);
    let job = model::JobModel::from_processes(parts);
    let findings = rules::diagnose(&job);
    let mut report = report::Report::build(&job, findings, problems);
    if summaries.len() > 1 || run.is_some() {
        report.run_note = runs::note(&summaries);
        report.runs = summaries;
    }
    Ok(report)
}

/// The runs of a directory, oldest first, and the files that could not be read.
pub fn read_runs(
    dir: &Path,
    progress: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<(Vec<runs::RunParts>, Vec<load::Problem>)> {
    let files = load::find_dumps(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", dir.display()))?;
    if let Some(pb) = progress {
        pb.set_length(files.len() as u64);
    }
    let (parts, problems) = load::load_models(dir, &files, progress);
    let mut runs = runs::split(parts);
    if runs.is_empty() {
        // Nothing readable: an empty run, so the report still lists the problems.
        runs = runs::split(Vec::new());
        runs.push(runs::RunParts {
            summary: runs::RunSummary {
                id: String::new(),
                source: String::new(),
                processes: 0,
                hosts: 0,
                first_t_unix_ns: 0,
                last_t_unix_ns: 0,
                reported: false,
            },
            parts: Vec::new(),
        });
    }
    Ok((runs, problems))
}

/// The analysis part of [`analyze_dir`], for callers that read the dumps themselves.
pub fn analyze_loaded(dir: &Path, loaded: load::Loaded) -> report::Report {
    let job = model::JobModel::build(&loaded.dumps, |d| load::display_path(dir, &d.path));
    let findings = rules::diagnose(&job);
    report::Report::build(&job, findings, loaded.problems)
}
