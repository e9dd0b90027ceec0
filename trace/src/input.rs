//! `ncclshim trace DIR`: reads the job's dumps twice, never all at once. First each file in
//! turn for the model (ranks, clocks, how each process ended; compacted as `report` does) and
//! its [`DumpExtent`]; then, one process at a time, its files again for its events. Peak memory
//! follows the largest process, not the job (16 M records took 23 GB and more when the whole
//! job was one JSON tree).

use super::flight_recorder::TraceFlightRecorder;
use super::{write_trace_json, write_trace_to, DumpExtent};
use ncclshim_diagnose::load::{display_path, Listing, Problem, KEEP_OPERATIONS};
use ncclshim_diagnose::model::{JobModel, ProcessModel};
use ncclshim_format::reader::{read_dump, Dump};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

/// Dump bytes read at once in the first pass. A dump in memory (records and its model before
/// compaction) takes about 2.5 times its file's size, so parallel reads of big dumps are what
/// sets the peak; small dumps still go many at a time. A file larger than this is read alone.
const READ_BUDGET_BYTES: u64 = 192 << 20;

/// What the trace wrote.
pub struct TraceDone {
    /// Processes in the trace; `None` when no file was readable and nothing was written.
    pub processes: Option<usize>,
    /// Files that could not be read (or not read again).
    pub problems: Vec<Problem>,
}

/// Bytes of files being read, bounded by [`READ_BUDGET_BYTES`].
struct Budget {
    in_use: Mutex<u64>,
    freed: Condvar,
}

impl Budget {
    /// Waits until `bytes` fit (or nothing else is being read), then takes them.
    fn take(&self, bytes: u64) {
        let mut used = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        while *used > 0 && *used + bytes > READ_BUDGET_BYTES {
            used = self.freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += bytes;
    }

    fn give(&self, bytes: u64) {
        let mut used = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        *used -= bytes;
        self.freed.notify_all();
    }
}

/// One readable file of the first pass.
struct FirstRead {
    path: PathBuf,
    model: ProcessModel,
    extent: DumpExtent,
}

fn problem(dir: &Path, p: &Path, e: impl std::fmt::Display) -> Problem {
    Problem {
        file: display_path(dir, p),
        // The error names the full path; the problem line names the file once.
        error: e.to_string().replacen(&format!("{}: ", p.display()), "", 1),
    }
}

/// Writes the trace of the dumps `listing` found in `dir` where `output` says
/// ([`write_trace_to`]), with the Flight Recorder dumps `fr` names (those beside them in the
/// same listing, or a prefix of their own). Writes nothing when no file is readable.
pub fn trace_files(
    dir: &Path,
    listing: &Listing,
    fr: &ncclshim_diagnose::flight_recorder::Source,
    output: &Path,
) -> anyhow::Result<TraceDone> {
    let files = &listing.files;
    let budget = Budget {
        in_use: Mutex::new(0),
        freed: Condvar::new(),
    };
    let first: Vec<Result<FirstRead, Problem>> = files
        .par_iter()
        .map(|p| {
            let bytes = std::fs::metadata(p).map_or(0, |m| m.len());
            budget.take(bytes);
            let r = read_dump(p).map(|d| {
                let model =
                    ProcessModel::from_dump_compacted(&d, display_path(dir, p), KEEP_OPERATIONS);
                FirstRead {
                    path: p.clone(),
                    extent: DumpExtent::of(&d),
                    model,
                }
            });
            budget.give(bytes);
            r.map_err(|e| problem(dir, p, e))
        })
        .collect();
    let mut problems = Vec::new();
    let mut read = Vec::new();
    for r in first {
        match r {
            Ok(f) => read.push(f),
            Err(p) => problems.push(p),
        }
    }
    if read.is_empty() {
        return Ok(TraceDone {
            processes: None,
            problems,
        });
    }
    let keys: Vec<_> = read.iter().map(|f| f.model.key()).collect();
    let mut paths = Vec::with_capacity(read.len());
    let mut extents_by_file = Vec::with_capacity(read.len());
    let mut parts = Vec::with_capacity(read.len());
    for f in read {
        paths.push(f.path);
        extents_by_file.push(f.extent);
        parts.push(f.model);
    }
    // PyTorch Flight Recorder dumps name the process groups.
    let fr = TraceFlightRecorder::load(dir, fr, listing, &parts);
    let job = JobModel::from_processes(parts);
    // Each process's files, in listing order.
    let index: std::collections::HashMap<_, usize> = job
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.key(), i))
        .collect();
    let mut files_of: Vec<Vec<&Path>> = vec![Vec::new(); job.processes.len()];
    let mut extents: Vec<Vec<DumpExtent>> = vec![Vec::new(); job.processes.len()];
    for ((key, path), extent) in keys.iter().zip(&paths).zip(extents_by_file) {
        if let Some(&i) = index.get(key) {
            files_of[i].push(path);
            extents[i].push(extent);
        }
    }
    let mut reread: Vec<Problem> = Vec::new();
    write_trace_to(output, |out| {
        write_trace_json(out, &job, &fr, &extents, |i| {
            // The process's files were read a moment ago; one that is gone or changed since
            // (a job still writing) is left out and said so.
            let dumps: Vec<Result<Dump, Problem>> = files_of[i]
                .par_iter()
                .map(|p| read_dump(p).map_err(|e| problem(dir, p, e)))
                .collect();
            dumps
                .into_iter()
                .filter_map(|r| r.map_err(|p| reread.push(p)).ok())
                .collect()
        })?;
        Ok(())
    })?;
    problems.extend(reread);
    Ok(TraceDone {
        processes: Some(job.processes.len()),
        problems,
    })
}
