//! `ncclshim`: the command-line front end. Each subcommand is one enum variant and one call into
//! the library (`collector_cli`), so new subcommands slot in without touching the others.

use clap::{Parser, Subcommand, ValueEnum};
use collector_cli::{analyze_dir, dumpjson};
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
        /// Directory holding the job's `*.ncclshim` files (subdirectories one level deep too).
        dir: PathBuf,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Colors in the text report.
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
}

/// Exit status when the tool itself failed (unreadable input, bad arguments).
const TOOL_FAILED: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dump { file } => cmd_dump(&file),
        Command::Report { dir, json, color } => cmd_report(&dir, json, color),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ncclshim: error: {e:#}");
            ExitCode::from(TOOL_FAILED)
        }
    }
}

fn cmd_dump(file: &std::path::Path) -> anyhow::Result<ExitCode> {
    let dump = ncclshim_dump::reader::read_dump(file)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match dumpjson::write_dump_lines(&dump, &mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `ncclshim dump f | head` is normal use.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}

/// Reading fewer dumps than this is instant; a progress bar would only flicker.
const PROGRESS_MIN_FILES: usize = 64;

fn cmd_report(dir: &std::path::Path, json: bool, color: ColorChoice) -> anyhow::Result<ExitCode> {
    if !dir.is_dir() {
        anyhow::bail!("{}: not a directory", dir.display());
    }
    let files = collector_cli::load::find_dumps(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", dir.display()))?;
    if files.is_empty() {
        anyhow::bail!("{}: no *.ncclshim dump files here (set NCCLSHIM_DIR for the job, or point at the directory it used)", dir.display());
    }
    let progress = (!json && std::io::stderr().is_terminal() && files.len() >= PROGRESS_MIN_FILES)
        .then(|| {
            let pb = indicatif::ProgressBar::new(files.len() as u64);
            pb.set_style(
                indicatif::ProgressStyle::with_template(
                    "reading dumps {bar:40} {pos}/{len} ({per_sec})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            pb
        });
    let report = analyze_dir(dir, progress.as_ref())?;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    let readable = report.job.dumps;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let color = match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
        };
        write!(out, "{}", report.to_text(color))?;
    }
    if readable == 0 {
        eprintln!(
            "ncclshim: none of the {} dump file(s) could be read",
            report.problems.len()
        );
        return Ok(ExitCode::from(TOOL_FAILED));
    }
    Ok(ExitCode::from(report.exit_code() as u8))
}
