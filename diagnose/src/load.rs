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

/// Reads `files` in parallel and turns each into its part of a process model right away, so a
/// file's raw records are freed before the next one is read and its long history is compacted
/// ([`ProcessModel::compact`]): peak memory follows ranks x a small model, not ranks x dump.
pub fn load_models(
    dir: &Path,
    files: &[PathBuf],
    progress: Option<&dyn crate::progress::Progress>,
) -> (Vec<ProcessModel>, Vec<Problem>) {
    let results: Vec<Result<ProcessModel, Problem>> = files
        .par_iter()
        .map(|p| {
            let r = read_dump(p)
                .map(|d| {
                    ProcessModel::from_dump_compacted(&d, display_path(dir, p), KEEP_OPERATIONS)
                })
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
