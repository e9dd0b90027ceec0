//! Finding and reading every dump of a job directory, in parallel, without letting one bad
//! file stop the rest: each unreadable file becomes a [`Problem`] with a one-line reason.

use crate::model::ProcessModel;
use ncclshim_format::reader::{read_dump, Dump};
use rayon::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A file that could not be read as a dump.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub error: String,
}

/// Every readable dump plus one problem per bad file.
pub struct Loaded {
    pub dumps: Vec<Dump>,
    pub problems: Vec<Problem>,
}

fn is_dump_name(p: &Path) -> bool {
    // `<host>.<pid>.<start>.<tag>.ncclshim`, or `... .ncclshim.N` when O_EXCL had to pick another name.
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.ends_with(".ncclshim")
            || n.rsplit_once(".ncclshim.")
                .is_some_and(|(_, s)| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The dump files of a directory, and what could not be looked at.
#[derive(Debug, Default)]
pub struct Listing {
    /// Regular files with a dump's name, each file once, sorted.
    pub files: Vec<PathBuf>,
    /// Entries that could not be listed or are not regular files (a FIFO named like a dump
    /// would block a reader forever; an unreadable subdirectory would hide dumps silently).
    pub problems: Vec<Problem>,
}

/// Dump files in `dir` and its direct subdirectories (one per host is a common layout), sorted.
pub fn find_dumps(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    list_dumps(dir).map(|l| l.files)
}

/// As [`find_dumps`], with the entries that could not be used as problems. A file reached
/// twice (a symbolic link back into the directory, a loop) is listed once, by its shortest
/// path: files are the same when their device and inode are.
pub fn list_dumps(dir: &Path) -> std::io::Result<Listing> {
    use std::os::unix::fs::MetadataExt;
    let mut candidates: Vec<(PathBuf, std::fs::Metadata)> = Vec::new();
    let mut problems = Vec::new();
    let mut problem = |p: &Path, error: String| {
        problems.push(Problem {
            file: display_path(dir, p),
            error,
        })
    };
    for entry in std::fs::read_dir(dir)? {
        let path = match entry {
            Ok(e) => e.path(),
            Err(e) => {
                problem(dir, format!("cannot list: {e}"));
                continue;
            }
        };
        // Follows links: a link to a dump (or to a host's subdirectory) is read.
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                problem(&path, format!("cannot look at it: {e}"));
                continue;
            }
        };
        if meta.is_dir() {
            let sub = match std::fs::read_dir(&path) {
                Ok(sub) => sub,
                Err(e) => {
                    problem(&path, format!("cannot list this subdirectory: {e}"));
                    continue;
                }
            };
            for e in sub {
                let p = match e {
                    Ok(e) => e.path(),
                    Err(e) => {
                        problem(&path, format!("cannot list this subdirectory: {e}"));
                        break;
                    }
                };
                if is_dump_name(&p) {
                    match std::fs::metadata(&p) {
                        Ok(m) => candidates.push((p, m)),
                        Err(e) => problem(&p, format!("cannot look at it: {e}")),
                    }
                }
            }
        } else if is_dump_name(&path) {
            candidates.push((path, meta));
        }
    }
    let mut files = Vec::new();
    for (p, m) in candidates {
        if m.is_file() {
            files.push((p, m));
        } else {
            problem(
                &p,
                format!("not a regular file ({}); not read", file_type_name(&m)),
            );
        }
    }
    // Shortest path first, so a file reached through a link loop keeps its direct name.
    files.sort_by_cached_key(|(p, _)| (p.components().count(), p.clone()));
    let mut seen = std::collections::HashSet::new();
    files.retain(|(_, m)| seen.insert((m.dev(), m.ino())));
    let mut files: Vec<PathBuf> = files.into_iter().map(|(p, _)| p).collect();
    files.sort();
    problems.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(Listing { files, problems })
}

/// What kind of non-regular file `m` is, for a problem line.
fn file_type_name(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// The path as shown in reports: relative to the job directory when inside it.
pub fn display_path(dir: &Path, p: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).display().to_string()
}

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
    progress: Option<&indicatif::ProgressBar>,
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
    progress: Option<&indicatif::ProgressBar>,
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

    #[test]
    fn dump_names() {
        assert!(is_dump_name(Path::new("/d/h.1.2.shim.ncclshim")));
        assert!(is_dump_name(Path::new("/d/h.1.2.shim.ncclshim.3")));
        assert!(!is_dump_name(Path::new("/d/h.1.2.shim.ncclshim.bak")));
        assert!(!is_dump_name(Path::new("/d/notes.txt")));
    }
}
