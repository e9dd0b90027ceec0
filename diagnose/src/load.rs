//! Finding and reading every dump of a job directory, in parallel, without letting one bad
//! file stop the rest: each unreadable file becomes a [`Problem`] with a one-line reason.

use crate::model::ProcessModel;
use ncclshim_format::reader::{read_dump, Dump};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Every readable dump plus one problem per bad file.
pub struct Loaded {
    pub dumps: Vec<Dump>,
    pub problems: Vec<Problem>,
}

// The walk of the job directory has its own module (with the problem lines and the paths it
// shows); its listing is named from here too, where the readers of what it lists are.
pub use crate::job_dir::{display_path, find_dumps, list_dumps, Listing, Problem};

/// Completed collectives kept per thread (and profiler Coll events per communicator) once a
/// dump is read: the rules look at the last operations before a failure, never at thousands,
/// and keeping a ring's worth of each of 16k ranks would take gigabytes.
pub const KEEP_OPERATIONS: usize = 256;

/// The most completed operations the report keeps of a whole job: [`KEEP_OPERATIONS`] a part (a
/// dump file, or a process of a summary) up to 32,768 parts (16,384 ranks, each with its
/// profiler's dump), fewer a part beyond. The kept operations are most of the report's memory
/// (~80 KB a rank at 256): at 100,000 ranks the full 256 would hold ~9 GB, this ~1.5 GB
/// (BENCHMARKS.md "Summaries"). The rules read the last operations before a failure, never
/// more than the last few dozen.
pub const KEPT_OPERATIONS_IN_ALL: usize = KEEP_OPERATIONS * 32_768;

/// Never fewer than this kept a thread and a communicator, however large the job.
pub const MIN_KEEP_OPERATIONS: usize = 32;

/// The environment variable that sets the operations kept a part, for checking what a smaller
/// keep changes on a job small enough to read with the full one (BENCHMARKS.md "Summaries").
pub const KEEP_OPERATIONS_ENV: &str = "NCCLSHIM_KEEP_OPERATIONS";

/// The operations kept a thread and a communicator when the job has `parts` parts in all.
pub fn keep_operations(parts: usize) -> usize {
    if let Some(keep) = std::env::var(KEEP_OPERATIONS_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|k| *k > 0)
    {
        return keep;
    }
    (KEPT_OPERATIONS_IN_ALL / parts.max(1)).clamp(MIN_KEEP_OPERATIONS, KEEP_OPERATIONS)
}

/// Reads `files` in parallel and turns each into its part of a process model right away, so a
/// file's raw records are freed before the next one is read and its long history is compacted
/// ([`ProcessModel::compact`]) to `keep` operations: peak memory follows ranks x a small model,
/// not ranks x dump.
pub fn load_models(
    dir: &Path,
    files: &[PathBuf],
    keep: usize,
    progress: Option<&dyn crate::progress::Progress>,
) -> (Vec<ProcessModel>, Vec<Problem>) {
    let results: Vec<Result<ProcessModel, Problem>> = files
        .par_iter()
        .map(|p| {
            let r = read_dump(p)
                .map(|d| ProcessModel::from_dump_compacted(&d, display_path(dir, p), keep))
                .map_err(|e| problem(dir, p, e));
            if let Some(pb) = progress {
                pb.inc(1);
            }
            r
        })
        .collect();
    let mut models = Vec::new();
    let mut problems = Vec::new();
    for r in results {
        match r {
            Ok(m) => models.push(m),
            Err(p) => problems.push(p),
        }
    }
    (models, problems)
}

fn problem(dir: &Path, p: &Path, e: ncclshim_format::reader::DumpError) -> Problem {
    Problem {
        file: display_path(dir, p),
        // The error names the full path; the problem line names the file once.
        error: e.to_string().replacen(&format!("{}: ", p.display()), "", 1),
    }
}

/// Reads `files` in parallel; `progress` is ticked once per file.
pub fn load_files(
    dir: &Path,
    files: &[PathBuf],
    progress: Option<&dyn crate::progress::Progress>,
) -> Loaded {
    let results: Vec<Result<Dump, Problem>> = files
        .par_iter()
        .map(|p| {
            let r = read_dump(p).map_err(|e| problem(dir, p, e));
            if let Some(pb) = progress {
                pb.inc(1);
            }
            r
        })
        .collect();
    let mut dumps = Vec::new();
    let mut problems = Vec::new();
    for r in results {
        match r {
            Ok(d) => dumps.push(d),
            Err(p) => problems.push(p),
        }
    }
    Loaded { dumps, problems }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every job up to 32,768 parts keeps 256 (all fixtures and captures: their reports are
    /// unchanged); 100,000 ranks with their profiler dumps keep 41; never fewer than 32.
    #[test]
    fn operations_kept_shrink_only_beyond_32768_parts() {
        assert_eq!(keep_operations(1), KEEP_OPERATIONS);
        assert_eq!(keep_operations(32_768), KEEP_OPERATIONS);
        assert_eq!(keep_operations(32_769), KEEP_OPERATIONS - 1);
        assert_eq!(keep_operations(200_000), 41);
        assert_eq!(keep_operations(10_000_000), MIN_KEEP_OPERATIONS);
    }
}
