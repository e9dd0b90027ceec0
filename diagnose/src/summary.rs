//! Summaries: what the diagnosis needs from some of a job's processes, kilobytes per rank where
//! their dumps take megabytes, so a large job is read where its dumps lie (one `ncclshim
//! summarize` per node, run by the job's own launcher) and reported from the summaries alone
//! (issue 37).
//!
//! A summary holds the very [`ProcessModel`]s the report builds from the dumps (read and compacted
//! as [`crate::load::load_models`] does, so findings on summaries are those on the dumps), with
//! the problems met reading them. That type is the one definition shared by writer and reader;
//! its fields that point into the dump schema are written by id (`model::serial`). Summaries
//! compose: summarizing a directory that holds summaries carries their processes on, so very
//! large jobs reduce in a tree (node, rack, pod).
//!
//! The file (version 2) is the [`Summary`] in postcard (serde's fields in order, integers as
//! varints, no field names) inside a zstd frame: at 100,000 ranks the report on summaries is
//! mostly their decoding, which JSON made ~9x slower (BENCHMARKS.md "Summaries"). `format` and
//! `version` come first, as the dump format does it, and are read before the rest: a reader reads
//! every version of its own major and refuses another major with one line. Version 1 (gzip JSON,
//! `zcat F | jq .`) is still read. A damaged file (neither, cut short, not a summary) is one
//! problem line, never a stop.

use crate::load::{display_path, Problem, KEEP_OPERATIONS};
use crate::model::{serial, ProcessModel};
use flate2::read::GzDecoder;
use serde::{Deserialize, Serialize};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The `format` value of every summary.
pub const FORMAT_NAME: &str = "ncclshim-summary";
/// This writer's version: the major changes when a reader of the previous one would misread.
/// A minor may only add fields at the end of [`Summary`] (postcard has no field names).
pub const VERSION: [u32; 2] = [2, 0];
/// The version of gzip-compressed JSON summaries, still read.
const JSON_MAJOR: u32 = 1;
/// zstd's level for summaries: its default, a summary a node is made in well under a second.
const ZSTD_LEVEL: i32 = 3;
/// How a summary's file name ends (`<node>.ncclshim-summary`): found beside dumps by name.
pub use crate::job_dir::{is_summary_name, SUMMARY_FILE_SUFFIX as FILE_SUFFIX};

/// One summary file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// [`FORMAT_NAME`].
    pub format: String,
    /// [`VERSION`] of the writer.
    pub version: [u32; 2],
    /// The `ncclshim` that wrote it.
    pub writer_version: String,
    /// Where it was made (the node's host name) and when (Unix nanoseconds).
    pub made_on: String,
    pub made_unix_ns: u64,
    /// What was summarized: the directories and summaries named to `summarize`.
    pub inputs: Vec<String>,
    /// Dump files and summaries read, in all (a summary of summaries adds its inputs' counts).
    pub dumps_read: u64,
    /// The processes, each as the report's model of it.
    pub processes: Vec<ProcessModel>,
    /// Files that could not be read, each with its one-line reason (paths as the summarized
    /// directory showed them).
    pub problems: Vec<Problem>,
    /// PyTorch Flight Recorder dumps found beside the summarized dumps (absolute paths), which a
    /// summary does not carry yet: `report --flight-recorder` joins them from where they lie.
    #[serde(default)]
    pub flight_recorder_not_carried: Vec<String>,
}

impl Summary {
    /// A summary of `processes` read from `inputs`.
    pub fn new(inputs: Vec<String>, dumps_read: u64, processes: Vec<ProcessModel>) -> Self {
        Summary {
            format: FORMAT_NAME.to_string(),
            version: VERSION,
            writer_version: env!("CARGO_PKG_VERSION").to_string(),
            made_on: ncclshim_host_facts::host::hostname(),
            made_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            inputs,
            dumps_read,
            processes,
            problems: Vec::new(),
            flight_recorder_not_carried: Vec::new(),
        }
    }

    /// Writes it to `path` (0600, like the dumps: it holds the jobs' settings), through a
    /// temporary file renamed into place, so a reader never sees half a summary.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = temporary_path(path);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", tmp.display()))?;
        let written = (|| -> std::io::Result<()> {
            let mut z = zstd::stream::write::Encoder::new(BufWriter::new(file), ZSTD_LEVEL)?;
            postcard::to_io(self, &mut z).map_err(std::io::Error::other)?;
            let mut inner = z.finish()?;
            inner.flush()?;
            inner.get_ref().sync_all()
        })();
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
            let _ = std::fs::remove_file(&tmp);
            anyhow::bail!("{}: cannot write: {e}", path.display());
        }
        Ok(())
    }

    /// Reads a summary; every way it can be wrong is one line.
    pub fn read(path: &Path) -> Result<Summary, String> {
        // The decompressed bytes go through one buffer per reading thread, reused: no fresh
        // buffer per summary is left to the heap (16,384 ranks: -14% CPU and -14% peak RSS
        // against a new buffer each; BENCHMARKS.md "Summaries").
        thread_local! {
            static BYTES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let file = std::fs::read(path).map_err(|e| format!("cannot open: {e}"))?;
        let mut s: Summary = BYTES.with(|bytes| {
            let mut bytes = bytes.borrow_mut();
            bytes.clear();
            if file.starts_with(&ZSTD_MAGIC) {
                zstd::stream::read::Decoder::new(file.as_slice())
                    .and_then(|mut z| z.read_to_end(&mut bytes))
                    .map_err(|e| {
                        format!("not a readable summary (its compressed data is damaged: {e})")
                    })?;
                decode(&bytes)
            } else if file.starts_with(&GZIP_MAGIC) {
                GzDecoder::new(file.as_slice())
                    .read_to_end(&mut bytes)
                    .map_err(|e| {
                        format!("not a readable summary (its compressed data is damaged: {e})")
                    })?;
                decode_json(&bytes)
            } else {
                Err("not a readable summary (neither zstd nor gzip data)".to_string())
            }
        })?;
        for p in &mut s.processes {
            for c in &mut p.calls {
                serial::restore_name(c.call, &mut c.name);
            }
        }
        Ok(s)
    }
}

/// How a zstd frame and a gzip stream begin.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A summary of this major, its head read first: another format or major is said as such,
/// not as damage.
fn decode(bytes: &[u8]) -> Result<Summary, String> {
    #[derive(Deserialize)]
    struct Head {
        format: String,
        version: [u32; 2],
    }
    let damaged = |e: postcard::Error| format!("not a readable summary (damaged: {e})");
    let (head, _) = postcard::take_from_bytes::<Head>(bytes)
        .map_err(|_| "not an ncclshim summary (no `format: ncclshim-summary`)".to_string())?;
    check_head(Some(&head.format), Some(head.version), VERSION[0])?;
    postcard::from_bytes(bytes).map_err(damaged)
}

/// A version-1 summary (gzip JSON).
fn decode_json(text: &[u8]) -> Result<Summary, String> {
    // Not a summary of that major: read its head to say which it is.
    let s: Summary = serde_json::from_slice(text).map_err(|e| why_unreadable(text, e))?;
    check_head(Some(&s.format), Some(s.version), JSON_MAJOR)?;
    Ok(s)
}

/// The one line for a summary that did not decode as this version's (`error`): another format
/// or major version when its head says so, else the damage.
fn why_unreadable(text: &[u8], error: serde_json::Error) -> String {
    #[derive(Deserialize)]
    struct Head {
        format: Option<String>,
        version: Option<[u32; 2]>,
    }
    let damaged = |e: &dyn std::fmt::Display| format!("not a readable summary (damaged: {e})");
    match serde_json::from_slice::<Head>(text) {
        Ok(head) => check_head(head.format.as_deref(), head.version, JSON_MAJOR)
            .err()
            .unwrap_or_else(|| damaged(&error)),
        Err(_) => damaged(&error),
    }
}

/// Refuses another format, or a major version other than `major` (the one its encoding has).
fn check_head(format: Option<&str>, version: Option<[u32; 2]>, major: u32) -> Result<(), String> {
    if format != Some(FORMAT_NAME) {
        return Err("not an ncclshim summary (no `format: ncclshim-summary`)".to_string());
    }
    let version = version.unwrap_or([0, 0]);
    if version[0] != major {
        return Err(format!(
            "a summary of version {}.{}, which this ncclshim ({}, summary version {}.{}) cannot read; \
             read it with the ncclshim that wrote it",
            version[0],
            version[1],
            env!("CARGO_PKG_VERSION"),
            VERSION[0],
            VERSION[1]
        ));
    }
    Ok(())
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}", std::process::id()));
    path.with_file_name(name)
}

/// How many processes `files` (summaries) hold in all, read from their heads alone (the
/// decompression stops there). A version-1 summary (JSON) or a damaged one counts none.
pub fn count_processes(files: &[PathBuf]) -> usize {
    use rayon::prelude::*;
    files.par_iter().map(|p| processes_in(p).unwrap_or(0)).sum()
}

fn processes_in(path: &Path) -> Option<usize> {
    // Every field before `processes`, whose length postcard writes first.
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Head {
        format: String,
        version: [u32; 2],
        writer_version: String,
        made_on: String,
        made_unix_ns: u64,
        inputs: Vec<String>,
        dumps_read: u64,
        processes: u64,
    }
    let file = std::fs::File::open(path).ok()?;
    let mut z = zstd::stream::read::Decoder::new(file).ok()?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = z.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..n]);
        match postcard::take_from_bytes::<Head>(&bytes) {
            Ok((h, _)) if h.format == FORMAT_NAME && h.version[0] == VERSION[0] => {
                return usize::try_from(h.processes).ok()
            }
            Ok(_) => return None,
            Err(postcard::Error::DeserializeUnexpectedEnd) => continue,
            Err(_) => return None,
        }
    }
}

/// Reads `files` (summaries) in parallel: their processes, compacted further to `keep`
/// operations when that is fewer than a summary keeps (a large job, [`crate::load::keep_operations`]),
/// and their problems with each one's file shown under the summary's own name, plus one problem
/// per summary that cannot be read.
pub fn load_summaries(
    dir: &Path,
    files: &[PathBuf],
    keep: usize,
) -> (Vec<ProcessModel>, Vec<Problem>, u64) {
    use rayon::prelude::*;
    let read: Vec<(PathBuf, Result<Summary, String>)> = files
        .par_iter()
        .map(|p| {
            let mut s = Summary::read(p);
            if let Ok(s) = &mut s {
                if keep < KEEP_OPERATIONS {
                    // The same as compacting the dumps to `keep`: the last `keep` of the last
                    // 256 are the last `keep`.
                    s.processes.iter_mut().for_each(|m| m.compact(keep));
                }
            }
            (p.clone(), s)
        })
        .collect();
    let mut processes = Vec::new();
    let mut problems = Vec::new();
    let mut dumps_read = 0;
    for (p, r) in read {
        let shown = display_path(dir, &p);
        match r {
            Ok(s) => {
                dumps_read += s.dumps_read;
                if let Some(first) = s.flight_recorder_not_carried.first() {
                    problems.push(Problem {
                        file: shown.clone(),
                        error: format!(
                            "{} PyTorch Flight Recorder dump{} of {} not carried in this summary \
                             (such as {first}): name them with --flight-recorder to join them",
                            s.flight_recorder_not_carried.len(),
                            if s.flight_recorder_not_carried.len() == 1 {
                                ""
                            } else {
                                "s"
                            },
                            s.made_on
                        ),
                    });
                }
                processes.extend(s.processes);
                problems.extend(s.problems.into_iter().map(|q| Problem {
                    file: format!("{shown}: {}", q.file),
                    error: q.error,
                }));
            }
            Err(error) => problems.push(Problem { file: shown, error }),
        }
    }
    (processes, problems, dumps_read)
}

/// Summarizes `inputs` (job directories, with dumps and summaries, or summary files): every
/// process read and compacted as the report reads it. A process both in a dump and in a summary
/// is taken from the dump. Fails only when an input cannot be listed or holds nothing to read.
pub fn summarize(inputs: &[PathBuf]) -> Result<Summary, crate::error::ToolError> {
    let mut processes = Vec::new();
    let mut problems = Vec::new();
    let mut dumps_read = 0u64;
    let mut flight_recorder = Vec::new();
    for input in inputs {
        let (dir, dumps, summaries, listed_problems) = if input.is_file() {
            let dir = input.parent().unwrap_or(Path::new(".")).to_path_buf();
            (dir, Vec::new(), vec![input.clone()], Vec::new())
        } else {
            let listing = crate::job_dir::list_job_dir(input)?;
            flight_recorder.extend(
                crate::flight_recorder::find_in_dir(&listing)
                    .into_iter()
                    .map(|(p, _)| std::fs::canonicalize(&p).unwrap_or(p).display().to_string()),
            );
            (
                input.clone(),
                listing.files,
                listing.summaries,
                listing.problems,
            )
        };
        let (from_dumps, dump_problems) =
            crate::load::load_models(&dir, &dumps, KEEP_OPERATIONS, None);
        dumps_read += (dumps.len() - dump_problems.len()) as u64;
        let (from_summaries, summary_problems, inner) =
            load_summaries(&dir, &summaries, KEEP_OPERATIONS);
        dumps_read += inner;
        processes.extend(prefer_dumps(from_dumps, from_summaries, &mut problems));
        problems.extend(dump_problems);
        problems.extend(summary_problems);
        problems.extend(listed_problems);
    }
    let mut s = Summary::new(
        inputs.iter().map(|p| p.display().to_string()).collect(),
        dumps_read,
        processes,
    );
    s.problems = problems;
    s.flight_recorder_not_carried = flight_recorder;
    Ok(s)
}

/// The processes of dumps and of summaries read together, without a process twice: one that a
/// dump and a summary both hold (a summary written into the job directory, then the directory
/// reported) is taken from its dump, which may be newer; one line says how many were dropped.
pub fn prefer_dumps(
    mut from_dumps: Vec<ProcessModel>,
    from_summaries: Vec<ProcessModel>,
    problems: &mut Vec<Problem>,
) -> Vec<ProcessModel> {
    if from_summaries.is_empty() {
        return from_dumps;
    }
    let keys: std::collections::HashSet<_> = from_dumps.iter().map(ProcessModel::key).collect();
    let (twice, kept): (Vec<_>, Vec<_>) = from_summaries
        .into_iter()
        .partition(|p| keys.contains(&p.key()));
    if !twice.is_empty() {
        problems.push(Problem {
            file: "(summaries)".to_string(),
            error: format!(
                "{} process{} both in a summary and in dumps read here: taken from the dumps",
                twice.len(),
                if twice.len() == 1 { " is" } else { "es are" }
            ),
        });
    }
    from_dumps.extend(kept);
    from_dumps
}
