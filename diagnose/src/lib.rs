//! ncclshim's diagnosis as a library: the dumps of a whole job (every rank, every host) read
//! into one model, and the report of what failed first, where, why, and what to change.
//!
//! The pipeline, one module per step:
//! 1. **load** ([`job_dir`], [`load`], [`runs`]): the job directory walked once, every dump read
//!    in parallel (an unreadable file becomes a [`load::Problem`], never an abort), the dumps
//!    split into runs when the directory holds several;
//! 2. **model** ([`model`]): per process its calls, errors, host facts and profiler events,
//!    across processes the communicators and their members, clocks aligned across hosts; PyTorch
//!    Flight Recorder dumps join it ([`flight_recorder`]);
//! 3. **story** ([`story`]): told once, how each process ended, where each rank was, who waited
//!    for whom, the failure graph;
//! 4. **rules** ([`rules`]): the failure catalog's cases and the generic rules read the story
//!    and the facts, with what is known about NCCL in data files ([`knowledge`],
//!    `knowledge/*.toml`, each entry with its source); then the meta-rules, which read the
//!    findings made before them, in their declared order ([`rules::META_RULES`]), and NCCL's
//!    contract ([`invariants`]);
//! 5. **verdict** ([`rules::verdict`]): the findings ranked into primary, contributing and
//!    advisory;
//! 6. **report** ([`report`]): built once from the findings and what the Flight Recorder dumps
//!    quote for them ([`flight_recorder::quote`], [`report::Context`]), never edited after: the
//!    JSON structures (`docs/report-json.md`) and their text rendering
//!    ([`report::Report::to_text`]).
//!
//! Every step makes and reads [`finding`]s, the one module below them all: the finding and its
//! evidence, the registry that declares each finding once, and how processes are named.
//!
//! [`analyze_dir`] runs it all; [`analyze_run_with`] is what `ncclshim report` calls. The front
//! end (argument parsing, progress bar, `doctor`, `run`, `trace`) is the `ncclshim` binary's
//! (collector-cli/); a progress bar plugs in through [`progress::Progress`].
//!
//! ```no_run
//! use std::path::Path;
//!
//! let report = ncclshim_diagnose::analyze_dir(Path::new("ncclshim-dumps/job-42"), None)?;
//! if let Some(first) = &report.first_failure {
//!     println!("first failure on {} pid {}: {}", first.host, first.pid, first.what);
//! }
//! print!("{}", report.to_text(false));
//! std::process::exit(report.exit_code());
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod backend;
pub mod error;
pub mod finding;
pub mod flight_recorder;
pub mod invariants;
pub mod job_dir;
pub mod knowledge;
pub mod load;
pub mod message_facts;
pub mod model;
pub mod names;
pub mod profnames;
pub mod progress;
pub mod report;
pub mod rules;
pub mod runs;
pub mod story;
pub mod summary;
pub mod terminal;
pub mod visibility;

use std::path::Path;

pub use error::{ToolError, ToolErrorKind};
pub use job_dir::{job_dir_of, list_job_dir, open_job_dir, require_dumps};

/// Reads every dump under `dir` and returns the report (problems included). `progress` is
/// ticked once per file read.
pub fn analyze_dir(
    dir: &Path,
    progress: Option<&dyn progress::Progress>,
) -> anyhow::Result<report::Report> {
    analyze_run(dir, progress, None, &rules::Options::default(), false)
}

/// As [`analyze_dir`], about one run of the directory: the one `run` names (see
/// [`runs::choose`]), else the most recent, analysed with the user's [`rules::Options`]. When
/// the directory holds several runs the report lists them and says which one it is about.
/// `story_in_words`: also tell the story in words (`report --story`), which costs a line per
/// failure-graph node, so only when asked.
pub fn analyze_run(
    dir: &Path,
    progress: Option<&dyn progress::Progress>,
    run: Option<&str>,
    options: &rules::Options,
    story_in_words: bool,
) -> anyhow::Result<report::Report> {
    let listing = load::list_dumps(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", dir.display()))?;
    analyze_run_with(
        dir,
        &listing,
        progress,
        run,
        options,
        story_in_words,
        &flight_recorder::Source::InJobDir,
    )
}

/// As [`analyze_run`], reading PyTorch Flight Recorder dumps from `fr` (found in the job
/// directory, named by a path prefix, or not at all) and joining them with the shim's.
/// `listing` is the job directory's, walked once ([`load::list_dumps`]) for every reader.
pub fn analyze_run_with(
    dir: &Path,
    listing: &load::Listing,
    progress: Option<&dyn progress::Progress>,
    run: Option<&str>,
    options: &rules::Options,
    story_in_words: bool,
    fr: &flight_recorder::Source,
) -> anyhow::Result<report::Report> {
    let (runs, problems) = read_runs(dir, listing, progress);
    let chosen = runs::choose(&runs, run).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let chosen = Chosen {
        runs,
        problems,
        index: chosen,
        named: run.is_some(),
    };
    Ok(analyze_chosen(
        dir,
        listing,
        chosen,
        options,
        story_in_words,
        fr,
    ))
}

/// What `ncclshim run` reports on: the run of the processes it started, named in their dump
/// headers by `source` and `id` ([`runs::choose_own`]), never the most recent run of a
/// directory another job writes into too. `None` when no dump of `dir` is of that run.
pub fn analyze_own_run(
    dir: &Path,
    source: &str,
    id: &str,
    fr: &flight_recorder::Source,
) -> anyhow::Result<Option<report::Report>> {
    let listing = load::list_dumps(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", dir.display()))?;
    let (runs, problems) = read_runs(dir, &listing, None);
    let Some(chosen) = runs::choose_own(&runs, source, id) else {
        return Ok(None);
    };
    let chosen = Chosen {
        runs,
        problems,
        index: chosen,
        named: false,
    };
    Ok(Some(analyze_chosen(
        dir,
        &listing,
        chosen,
        &rules::Options::default(),
        false,
        fr,
    )))
}

/// The runs of a directory with the one to report on.
struct Chosen {
    runs: Vec<runs::RunParts>,
    /// The files that could not be read.
    problems: Vec<load::Problem>,
    index: usize,
    /// The caller named it: the report then lists the runs even when there is one.
    named: bool,
}

/// The analysis of the chosen run.
fn analyze_chosen(
    dir: &Path,
    listing: &load::Listing,
    chosen: Chosen,
    options: &rules::Options,
    story_in_words: bool,
    fr: &flight_recorder::Source,
) -> report::Report {
    let Chosen {
        mut runs,
        problems,
        index,
        named,
    } = chosen;
    runs[index].summary.reported = true;
    let summaries: Vec<runs::RunSummary> = runs.iter().map(|r| r.summary.clone()).collect();
    let mut parts = std::mem::take(&mut runs[index].parts);
    // Ranks with only a Flight Recorder dump join the model as stand-in processes.
    let window = flight_recorder::run_window::RunWindow::of(&summaries, index);
    let joined = flight_recorder::prepare(dir, fr, listing, &mut parts, window);
    let job = model::JobModel::from_processes(parts);
    let story = story::Story::build(&job);
    let findings = rules::diagnose_story(&job, &story, options);
    // Everything the report says is made before it is built, in the diagnosis's order.
    let pytorch_backend = backend::of_job(&job, joined.as_ref().map(|j| &j.fr));
    let flight_recorder = joined.map(|j| flight_recorder::quote(&job, &findings, j));
    let (runs_listed, run_note) = if summaries.len() > 1 || named {
        let note = runs::note(&summaries);
        (summaries, note)
    } else {
        (Vec::new(), None)
    };
    let context = report::Context {
        problems,
        flight_recorder,
        pytorch_backend,
        story: if story_in_words {
            story::render::lines(&job, &story)
        } else {
            Vec::new()
        },
        runs: runs_listed,
        run_note,
    };
    let report = report::Report::build(&job, &story, findings, context);
    // The model and the story are freed on a worker while the caller writes the report: at
    // 16k ranks freeing them is millions of allocations, a second on one core otherwise.
    rayon::spawn(move || drop((job, story, runs)));
    report
}

/// The runs of a directory (its dumps as `listing` found them), oldest first, and the files
/// that could not be read.
pub fn read_runs(
    dir: &Path,
    listing: &load::Listing,
    progress: Option<&dyn progress::Progress>,
) -> (Vec<runs::RunParts>, Vec<load::Problem>) {
    let files = &listing.files;
    if let Some(pb) = progress {
        pb.set_length(files.len() as u64);
    }
    // A very large job keeps fewer operations a process (load::KEPT_OPERATIONS_IN_ALL), the same
    // from dumps and from summaries, decided before any is read.
    let keep = load::keep_operations(files.len() + summary::count_processes(&listing.summaries));
    let (mut parts, mut problems) = load::load_models(dir, files, keep, progress);
    // Summaries (per node, `ncclshim summarize`) carry the same models, made where the dumps lie.
    let (summarized, summary_problems, _) = summary::load_summaries(dir, &listing.summaries, keep);
    parts = summary::prefer_dumps(parts, summarized, &mut problems);
    problems.extend(summary_problems);
    problems.extend(listing.problems.iter().cloned());
    let mut runs = runs::split(parts);
    if runs.is_empty() {
        // Nothing readable: an empty run, so the report still lists the problems.
        runs.push(runs::RunParts {
            summary: runs::RunSummary {
                id: String::new(),
                source: String::new(),
                processes: 0,
                hosts: 0,
                first_t_unix_ns: 0,
                last_t_unix_ns: 0,
                reported: false,
                attempt: None,
            },
            parts: Vec::new(),
        });
    }
    (runs, problems)
}
