//! The `ncclshim` CLI as a library: reading a job's dumps ([`load`]), the per-process and
//! cross-rank model ([`model`]), the rule set built from the failure catalog ([`rules`]), the
//! report ([`report`]), the raw `dump` view ([`dumpjson`]) and synthetic job dumps for tests and
//! benchmarks ([`synth`]).

pub mod doctor;
pub mod dumpjson;
pub mod knowledge;
pub mod libdirs;
pub mod load;
pub mod model;
pub mod names;
pub mod profnames;
pub mod report;
pub mod rules;
pub mod run;
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
    let files = load::find_dumps(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", dir.display()))?;
    if let Some(pb) = progress {
        pb.set_length(files.len() as u64);
    }
    let (parts, problems) = load::load_models(dir, &files, progress);
    let job = model::JobModel::from_processes(parts);
    let findings = rules::diagnose(&job);
    Ok(report::Report::build(&job, findings, problems))
}

/// The analysis part of [`analyze_dir`], for callers that read the dumps themselves.
pub fn analyze_loaded(dir: &Path, loaded: load::Loaded) -> report::Report {
    let job = model::JobModel::build(&loaded.dumps, |d| load::display_path(dir, &d.path));
    let findings = rules::diagnose(&job);
    report::Report::build(&job, findings, loaded.problems)
}
