//! `ncclshim`: the command-line front end. Each subcommand is one enum variant and one call into
//! the diagnosis library (`ncclshim_diagnose`) or the commands' modules (`collector_cli`), so new
//! subcommands slot in without touching the others.

use clap::{Parser, Subcommand, ValueEnum};
use collector_cli::dumpjson;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ncclshim",
    version,
    about = "Flight recorder for NCCL: which rank failed first, in which call, why, and what to change"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// Print every record of one dump file as JSON lines.
    Dump {
        /// A `*.ncclshim` file.
        file: PathBuf,
    },
    /// Analyze every dump of a job (all ranks, all nodes) and report what failed and why.
    Report {
        /// Directory holding the job's `*.ncclshim` files (subdirectories one level deep too)
        /// and summaries, or one `*.ncclshim-summary` file.
        dir: PathBuf,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Colors in the text report.
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
        /// How long the live ranks of a communicator must have recorded nothing before an
        /// operation that has not completed is called a hang (`10s`, `90s`, `5m`, `500ms`).
        /// Matters only while the job still runs: dumps of ended processes are read as final.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
        stall_after: std::time::Duration,
        /// Report on this run when the directory holds several (its launcher id such as a
        /// Slurm `JOBID.STEP`, `source:id`, a unique prefix, or `unnamed-N`); default: the most
        /// recent.
        #[arg(long, value_name = "ID")]
        run: Option<String>,
        /// List the runs in the directory (one per line; JSON with --json) and exit.
        #[arg(long)]
        list_runs: bool,
        /// After the report, print the job's story the diagnosis reasoned over: how each
        /// process ended, where each rank was, who waited for whom, the failure graph.
        #[arg(long, conflicts_with = "json")]
        story: bool,
        /// Show every finding in the text report (by default: the primary and the few findings
        /// that add to it; `--json` always has every finding).
        #[arg(long)]
        all: bool,
        /// PyTorch Flight Recorder dumps to join with the shim's: the prefix their ranks are
        /// appended to (what `TORCH_FR_DUMP_TEMP_FILE` was, `/tmp/fr/rank_`) or their directory.
        /// Default: those found in DIR (files named `<prefix><rank>`, up to 4 levels deep).
        #[arg(long, value_name = "PATH_PREFIX")]
        flight_recorder: Option<PathBuf>,
    },
    /// Summarize the dumps of one node (or any part of a job) where they lie: kilobytes per rank
    /// holding all the report needs. `report` reads summaries as it reads dumps (put them in one
    /// directory), with the same findings; summaries of summaries reduce very large jobs in a
    /// tree. Run it under the job's launcher, one task per node (see the README).
    Summarize {
        /// Job directories (their dumps and summaries, subdirectories one level deep too) or
        /// summary files.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// The summary to write (default: `<host name>.ncclshim-summary` in the current
        /// directory).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Serve Prometheus metrics (`/metrics`) of the live dumps in DIR: per process and
    /// communicator the operations issued and completed, the time since the last progress, the
    /// age of the operation in flight, the profiler's collectives, bytes and GPU time, failed
    /// calls by NCCL result, and whether a stall holds the rank (as `report` calls a hang). One
    /// per node, beside the job; stops on SIGINT or SIGTERM.
    Exporter {
        /// Address to listen on (`0.0.0.0:9464`; port 0 picks a free one, printed on stderr).
        #[arg(long, value_name = "ADDR")]
        listen: String,
        /// How long a communicator's live ranks must be quiet before a rank in or behind an
        /// unfinished operation is stalled (as `report --stall-after`).
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
        stall_after: std::time::Duration,
        /// The node's dump directory (`NCCLSHIM_DIR`).
        dir: PathBuf,
    },
    /// Write a Perfetto / Chrome trace (one process per rank, clocks aligned across hosts).
    Trace {
        /// Directory holding the job's `*.ncclshim` files.
        dir: PathBuf,
        /// Output file (open it in ui.perfetto.dev or chrome://tracing): `-` for stdout, a name
        /// ending in `.gz` for gzip-compressed JSON.
        #[arg(short, long, default_value = "trace.json")]
        output: PathBuf,
        /// PyTorch Flight Recorder dumps whose process groups name the communicators and whose
        /// entries (state, Python stack) go into each collective's args: as for `report`, the
        /// prefix their ranks are appended to or their directory. Default: those found in DIR.
        #[arg(long, value_name = "PATH_PREFIX")]
        flight_recorder: Option<PathBuf>,
    },
    /// Run a command with the recorder preloaded, the profiler plugin and the dump directory set;
    /// print the report of its own processes if the command fails or is stopped. SIGINT,
    /// SIGTERM, SIGHUP and SIGQUIT go to the command's whole process group; a second one kills it
    /// (SIGKILL). On a terminal the command is the foreground job: it reads the terminal, Ctrl-C
    /// reaches it directly, Ctrl-Z / fg / bg stop and continue it with `run`. Exits with the
    /// command's status (128 + signal when a signal ended it; 127 not found, 126 not executable).
    Run {
        /// Dump directory, used as is (default: a fresh <time>-<pid> directory under
        /// $NCCLSHIM_DIR, else under ./ncclshim-dumps).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Do not set NCCL_PROFILER_PLUGIN.
        #[arg(long)]
        no_plugin: bool,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: started by `run` under the planned LD_PRELOAD; exits 0 when the shim is loaded.
    #[command(name = collector_cli::run::PROBE_SUBCOMMAND, hide = true)]
    PreloadProbe { shim: PathBuf },
    /// Check this host before a job: NVIDIA driver, NCCL versions, libibverbs, peermem, /dev/shm,
    /// memlock, NCCL_* settings. Lists every check with its result; exits 1 when a job started on
    /// this host would fail. With DIR, also what the recorder could see in that job's dumps (NCCL
    /// linked statically or renamed, whose calls never reach the shim).
    Doctor {
        /// A job's dump directory to check as well.
        dir: Option<PathBuf>,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Colors in the text output.
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
}

/// One line to stderr, with any control character escaped: the lines quote paths, file names
/// and dump contents (see `ncclshim_diagnose::terminal`).
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("{}", ncclshim_diagnose::terminal::escape_controls(&format!($($arg)*)))
    };
}

/// Exit status when the tool itself failed (unreadable input, bad arguments).
const TOOL_FAILED: u8 = 2;

fn main() -> ExitCode {
    collector_cli::heap::tune();
    let cli = Cli::parse();
    let json = matches!(
        cli.command,
        Command::Report { json: true, .. } | Command::Doctor { json: true, .. }
    );
    let result = match cli.command {
        Command::Dump { file } => cmd_dump(&file),
        Command::Report {
            dir,
            json,
            color,
            stall_after,
            run,
            list_runs,
            story,
            all,
            flight_recorder,
        } => {
            let options = ncclshim_diagnose::rules::Options {
                stall_after_ns: u64::try_from(stall_after.as_nanos()).unwrap_or(u64::MAX),
                ..Default::default()
            };
            if list_runs {
                cmd_list_runs(&dir, json)
            } else {
                let fr = flight_recorder_source(flight_recorder);
                cmd_report(
                    &dir,
                    ReportOutput {
                        json,
                        color,
                        story,
                        all,
                    },
                    run.as_deref(),
                    &options,
                    &fr,
                )
            }
        }
        Command::Trace {
            dir,
            output,
            flight_recorder,
        } => cmd_trace(&dir, &output, flight_recorder),
        Command::Run {
            dir,
            no_plugin,
            command,
        } => cmd_run(dir.as_deref(), !no_plugin, &command),
        Command::Doctor { dir, json, color } => cmd_doctor(dir.as_deref(), json, color),
        Command::Summarize { inputs, output } => cmd_summarize(&inputs, output),
        Command::Exporter {
            listen,
            stall_after,
            dir,
        } => cmd_exporter(&listen, &dir, stall_after),
        Command::PreloadProbe { shim } => {
            return ExitCode::from(if collector_cli::run::shim_is_loaded(&shim) {
                0
            } else {
                3
            })
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            say!("ncclshim: error: {e:#}");
            let broken_pipe = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if json && !broken_pipe {
                // A program reading `--json` gets the failure as JSON too (docs/report-json.md).
                let _ = writeln!(
                    std::io::stdout(),
                    "{}",
                    ncclshim_diagnose::ToolError::from_anyhow(&e).to_json()
                );
            }
            ExitCode::from(TOOL_FAILED)
        }
    }
}

/// `30s`, `5m`, `1m30s`, `500ms`; a bare number is seconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(secs).map_err(|e| e.to_string());
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 5m, 500ms)"))
}

fn use_color(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => auto_color(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ),
    }
}

/// `--color auto`: colour on a terminal unless `NO_COLOR` is set to a non-empty value
/// (no-color.org: an empty `NO_COLOR=` does not disable colour).
fn auto_color(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Where the Flight Recorder dumps are: `--flight-recorder PATH_PREFIX`, else the job directory.
fn flight_recorder_source(prefix: Option<PathBuf>) -> ncclshim_diagnose::flight_recorder::Source {
    match prefix {
        Some(p) => ncclshim_diagnose::flight_recorder::Source::Prefix(p),
        None => ncclshim_diagnose::flight_recorder::Source::InJobDir,
    }
}

fn cmd_trace(
    dir: &std::path::Path,
    output: &std::path::Path,
    flight_recorder: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let listing = ncclshim_diagnose::load::list_dumps(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", dir.display()))?;
    let fr = flight_recorder_source(flight_recorder);
    let done = ncclshim_trace::input::trace_files(dir, &listing, &fr, output)?;
    for p in done.problems.iter().chain(&listing.problems) {
        say!("ncclshim: skipped {}: {}", p.file, p.error);
    }
    let Some(processes) = done.processes else {
        anyhow::bail!("{}: no readable dump files", dir.display());
    };
    let to = if output == std::path::Path::new("-") {
        "the trace to stdout".to_owned()
    } else {
        output.display().to_string()
    };
    say!(
        "ncclshim: wrote {to} ({} processes); open it in ui.perfetto.dev",
        processes
    );
    Ok(ExitCode::SUCCESS)
}

fn cmd_run(
    dir: Option<&std::path::Path>,
    with_plugin: bool,
    command: &[std::ffi::OsString],
) -> anyhow::Result<ExitCode> {
    use collector_cli::run;
    let plan = run::plan(dir, with_plugin, |k| std::env::var_os(k))?;
    if let Some(note) = &plan.plugin_note {
        say!("{note}");
    }
    let preload = run::probe_preload(&plan);
    if let run::Preload::Fails(why) = &preload {
        say!("ncclshim: warning: the recorder cannot be preloaded here, the job runs unrecorded: {why}");
    }
    let outcome = match run::execute(&plan, command)? {
        run::RunEnd::NotStarted { code, message } => {
            say!("ncclshim: {message}");
            return Ok(ExitCode::from(code));
        }
        run::RunEnd::Finished(o) => o,
    };
    let code = outcome.code();
    let exit = ExitCode::from(code.clamp(0, 255) as u8);
    let how = outcome.how_it_ended();
    // The report of this run's processes alone: another job may write into the same directory.
    let in_dir = ncclshim_diagnose::load::find_dumps(&plan.dir).unwrap_or_default();
    let own = &plan.own_run;
    let report = if in_dir.is_empty() {
        Ok(None)
    } else {
        ncclshim_diagnose::analyze_own_run(
            &plan.dir,
            &own.source,
            &own.id,
            &ncclshim_diagnose::flight_recorder::Source::InJobDir,
        )
    };
    // A job that succeeded: one line, where its dumps are; two when a rank's call failed all
    // the same (the job caught the error or fell back). A stopped job is reported whatever its
    // exit code: stopping a hung job is the point.
    if code == 0 && !outcome.stopped() {
        match &report {
            Ok(None) => say!("ncclshim: {how}; no process called NCCL, nothing was recorded"),
            Ok(Some(r)) => match collector_cli::caught::notice(&how, r, &plan.dir) {
                Some(lines) => {
                    for line in lines {
                        say!("{line}");
                    }
                }
                None => say!(
                    "ncclshim: {how}; {} dump file(s) in {} (`ncclshim report{}` or `ncclshim trace` on it)",
                    r.job.dumps,
                    plan.dir.display(),
                    collector_cli::caught::run_option(r)
                ),
            },
            Err(e) => say!("ncclshim: {how}; no report: {e:#}"),
        }
        return Ok(exit);
    }
    let report = match report {
        Ok(Some(r)) => r,
        Ok(None) => {
            let why = match &preload {
                run::Preload::Fails(why) => format!("the recorder was not loaded ({why})"),
                run::Preload::Loads if ncclshim_dump::config::disabled_by_env() => {
                    "recording was turned off by NCCLSHIM_DISABLE".to_owned()
                }
                run::Preload::Loads => {
                    "the recorder loads here, but no process of the job called NCCL \
                     (or NCCL is linked statically, or the job replaced LD_PRELOAD, NCCLSHIM_DIR \
                     or NCCLSHIM_RUN_ID)"
                        .to_owned()
                }
            };
            let others = if in_dir.is_empty() {
                String::new()
            } else {
                format!(
                    " (the dumps there are other runs': `ncclshim report {} --list-runs`)",
                    plan.dir.display()
                )
            };
            say!(
                "ncclshim: {how} and wrote no dump in {}{others}: {why}; there is no report",
                plan.dir.display()
            );
            return Ok(exit);
        }
        Err(e) => {
            say!("ncclshim: {how}; no report: {e:#}");
            return Ok(exit);
        }
    };
    if outcome.stopped() {
        say!(
            "ncclshim: {how}; what the ranks had done (report of {}):",
            plan.dir.display()
        );
    } else {
        say!("ncclshim: {how}; report of {}:", plan.dir.display());
    }
    print!("{}", report.to_text(use_color(ColorChoice::Auto)));
    Ok(exit)
}

fn cmd_doctor(
    dir: Option<&std::path::Path>,
    json: bool,
    color: ColorChoice,
) -> anyhow::Result<ExitCode> {
    use ncclshim_doctor as doctor;
    let facts = doctor::collect();
    let mut checks = doctor::run_checks(&facts);
    if let Some(dir) = dir {
        checks.extend(doctor::dump_checks(dir)?);
    }
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &doctor::DoctorReport::new(&checks, &facts))?;
        writeln!(out)?;
    } else {
        write!(
            out,
            "{}",
            collector_cli::doctor::render_text(&checks, use_color(color))
        )?;
    }
    // 1 when a job started on this host would fail, as `report` exits 1 on a failure.
    Ok(ExitCode::from(u8::from(doctor::job_would_fail(&checks))))
}

fn cmd_summarize(inputs: &[PathBuf], output: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    use ncclshim_diagnose::summary;
    let output = output.unwrap_or_else(|| {
        PathBuf::from(format!(
            "{}{}",
            ncclshim_host_facts::host::hostname(),
            summary::FILE_SUFFIX
        ))
    });
    let s = summary::summarize(inputs).map_err(|e| anyhow::anyhow!(e.message))?;
    s.write(&output)?;
    let size = std::fs::metadata(&output).map_or(0, |m| m.len());
    let per = size / (s.processes.len().max(1) as u64);
    say!(
        "ncclshim summarize: {} process{} from {} file{} -> {} ({} KiB, {} KiB per process){}",
        s.processes.len(),
        if s.processes.len() == 1 { "" } else { "es" },
        s.dumps_read,
        if s.dumps_read == 1 { "" } else { "s" },
        output.display(),
        size.div_ceil(1024),
        per.div_ceil(1024),
        match s.problems.len() {
            0 => String::new(),
            n => format!("; {n} problem{} kept in it", if n == 1 { "" } else { "s" }),
        }
    );
    if let Some(first) = s.flight_recorder_not_carried.first() {
        say!(
            "ncclshim summarize: {} PyTorch Flight Recorder dump{} (such as {first}) not carried in the summary: \
             give `report` their prefix with --flight-recorder",
            s.flight_recorder_not_carried.len(),
            if s.flight_recorder_not_carried.len() == 1 { "" } else { "s" },
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_exporter(
    listen: &str,
    dir: &std::path::Path,
    stall_after: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    use collector_cli::exporter::Exporter;
    let stall_after_ns = u64::try_from(stall_after.as_nanos()).unwrap_or(u64::MAX);
    let mut exporter = match Exporter::bind(listen, dir, stall_after_ns) {
        Ok(e) => e,
        Err(why) => {
            say!("ncclshim exporter: {why}");
            return Ok(ExitCode::from(TOOL_FAILED));
        }
    };
    let stop = collector_cli::exporter::stop_on_signals();
    // The bound address, port 0 resolved: what a test or a wrapper script connects to.
    say!(
        "ncclshim exporter: serving http://{}/metrics for {}",
        exporter.local_addr(),
        dir.display()
    );
    exporter.serve(stop);
    // Not `say!`: whoever read the address may have closed stderr since, and a failed write
    // must not turn a clean stop into a panic.
    let _ = writeln!(std::io::stderr(), "ncclshim exporter: stopped");
    Ok(ExitCode::SUCCESS)
}

fn cmd_dump(file: &std::path::Path) -> anyhow::Result<ExitCode> {
    // Streamed: the records are read from the file as they are printed, never all held.
    let stream = ncclshim_format::reader::open_stream(file)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match dumpjson::write_dump_stream(&stream, &mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `ncclshim dump f | head` is normal use.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}

/// The terminal's progress bar for the diagnosis' reading of the dumps (the library ticks a
/// [`ncclshim_diagnose::progress::Progress`] and knows nothing of terminals).
struct ProgressBar(indicatif::ProgressBar);

impl ncclshim_diagnose::progress::Progress for ProgressBar {
    fn set_length(&self, files: u64) {
        self.0.set_length(files);
    }

    fn inc(&self, files: u64) {
        self.0.inc(files);
    }
}

/// Reading fewer dumps than this is instant; a progress bar would only flicker.
const PROGRESS_MIN_FILES: usize = 64;

fn cmd_list_runs(dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let listing = ncclshim_diagnose::list_job_dir(dir)?;
    let (runs, _) = ncclshim_diagnose::read_runs(dir, &listing, None);
    let runs: Vec<_> = runs.into_iter().map(|r| r.summary).collect();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &runs)?;
        writeln!(out)?;
    } else {
        let safe = ncclshim_diagnose::terminal::escape_controls;
        for r in &runs {
            writeln!(
                out,
                "{}\t{}\t{} {} on {} {}\tstarted {}",
                safe(&r.id),
                if r.source.is_empty() {
                    "-".into()
                } else {
                    safe(&r.source)
                },
                r.processes,
                if r.processes == 1 {
                    "process"
                } else {
                    "processes"
                },
                r.hosts,
                if r.hosts == 1 { "host" } else { "hosts" },
                ncclshim_diagnose::runs::utc_text(r.first_t_unix_ns)
            )?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// How `report` prints: JSON or text, colours, the story after it, every finding.
struct ReportOutput {
    json: bool,
    color: ColorChoice,
    story: bool,
    all: bool,
}

fn cmd_report(
    dir: &std::path::Path,
    output: ReportOutput,
    run: Option<&str>,
    options: &ncclshim_diagnose::rules::Options,
    fr: &ncclshim_diagnose::flight_recorder::Source,
) -> anyhow::Result<ExitCode> {
    let ReportOutput {
        json,
        color,
        story,
        all,
    } = output;
    // The one walk of the directory: its dumps, the Flight Recorder's candidates, the problems.
    // A summary file may be named instead: it is read alone, its name shown from its folder.
    let listing = ncclshim_diagnose::open_job_dir(dir)?;
    let dir = ncclshim_diagnose::job_dir_of(dir);
    match ncclshim_diagnose::require_dumps(dir, &listing) {
        Ok(()) => {}
        // A directory of PyTorch Flight Recorder dumps alone is still a job to report on.
        Err(e)
            if e.kind == ncclshim_diagnose::ToolErrorKind::NoDumps
                && ncclshim_diagnose::flight_recorder::any_in(fr, &listing) => {}
        Err(e) => return Err(e.into()),
    }
    let files = &listing.files;
    let progress = (!json && std::io::stderr().is_terminal() && files.len() >= PROGRESS_MIN_FILES)
        .then(|| {
            let pb = indicatif::ProgressBar::new(files.len() as u64);
            pb.set_style(
                indicatif::ProgressStyle::with_template(
                    "reading dumps {bar:40} {pos}/{len} ({per_sec})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            ProgressBar(pb)
        });
    let report = ncclshim_diagnose::analyze_run_with(
        dir,
        &listing,
        progress
            .as_ref()
            .map(|p| p as &dyn ncclshim_diagnose::progress::Progress),
        run,
        options,
        story && !json,
        fr,
    )?;
    if let Some(ProgressBar(pb)) = progress {
        pb.finish_and_clear();
    }
    if report.job.dumps == 0 {
        // Nothing was read: there is no report to print (and no "no problem found" to claim).
        for p in &report.problems {
            say!("ncclshim: {}: {}", p.file, p.error);
        }
        let mut e = ncclshim_diagnose::ToolError::new(
            ncclshim_diagnose::ToolErrorKind::NoReadableDumps,
            dir,
            format!(
                "{}: none of the {} could be read",
                dir.display(),
                ncclshim_diagnose::report::count(report.problems.len(), "dump file", "dump files")
            ),
        );
        e.problems = report.problems;
        return Err(e.into());
    }
    // Buffered: stdout is line-buffered, and a pretty-printed report of a 16k-rank job is half a
    // million lines (as many `write` calls).
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        // How the text is rendered is the reader's choice, not part of the report.
        let options = ncclshim_diagnose::report::text::TextOptions {
            color: use_color(color),
            all_findings: all,
        };
        write!(out, "{}", report.to_text_with(options))?;
        if story {
            writeln!(out)?;
            for line in &report.story {
                // The story quotes recorded texts: no control character reaches the terminal.
                writeln!(
                    out,
                    "{}",
                    ncclshim_diagnose::terminal::escape_controls(line)
                )?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::from(report.exit_code() as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_a_non_empty_no_color_turns_colour_off() {
        assert!(auto_color(true, None));
        assert!(auto_color(true, Some(OsStr::new(""))));
        assert!(!auto_color(true, Some(OsStr::new("1"))));
        assert!(!auto_color(false, None));
    }

    #[test]
    fn stall_durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5").is_err());
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
