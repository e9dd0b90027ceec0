//! The dumps of a directory as process models, kept between scrapes: a file is read again only
//! when its fingerprint changed, so a scrape of a node whose ranks are idle (or finished) costs a
//! directory walk and a small read per file, not a parse of every ring.
//!
//! The fingerprint is the file's size and mtime plus a hash of its first
//! [`FINGERPRINT_BYTES`]: the header page (flags, counters, the last sign of life, the clean-exit
//! stamp) and the ring directory after it (every ring's head). The mtime alone is not enough:
//! the writers store through a shared mapping, and the kernel moves the mtime of such a file
//! only when a clean page is first dirtied, so a page written twice between two writebacks
//! changes the file without changing its mtime. Every record moves a ring head, which the hash
//! sees.

use ncclshim_diagnose::load::{display_path, Problem, KEEP_OPERATIONS};
use ncclshim_diagnose::model::ProcessModel;
use rayon::prelude::*;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// The header page and the ring directory of up to 960 rings.
pub const FINGERPRINT_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    mtime: Option<SystemTime>,
    head_hash: u64,
}

fn fingerprint(p: &Path) -> std::io::Result<Fingerprint> {
    let f = std::fs::File::open(p)?;
    let meta = f.metadata()?;
    let mut head = Vec::with_capacity(FINGERPRINT_BYTES);
    f.take(FINGERPRINT_BYTES as u64).read_to_end(&mut head)?;
    // Not keyed: the input is our own dumps, and a collision only delays one re-read.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    head.hash(&mut h);
    Ok(Fingerprint {
        len: meta.len(),
        mtime: meta.modified().ok(),
        head_hash: h.finish(),
    })
}

/// NCCL calls that failed, by result name (`unknown` for a code the knowledge files lack).
pub type FailedCalls = std::collections::BTreeMap<&'static str, u64>;

/// One dump as the metrics need it: its model, compacted as `report` reads it, and its failed
/// NCCL calls counted before compaction, which keeps only the first and the last of a run of
/// identical failures (a rank retrying its rendezvous thousands of times is thousands here).
pub struct Parsed {
    pub model: ProcessModel,
    pub failed: FailedCalls,
}

/// One file as a scrape found it: its fingerprint, what it held, and whether it was parsed again.
type Read = (Fingerprint, Arc<Parsed>, bool);

/// What one scrape read: the models of every readable dump, the unreadable ones, and how many
/// files had to be parsed again.
pub struct Scan {
    pub models: Vec<Arc<Parsed>>,
    pub problems: Vec<Problem>,
    pub files: usize,
    pub parsed: usize,
    /// Whether any model differs from the last scrape's (a file parsed again, added or gone).
    pub changed: bool,
}

/// The models of the last scrape, by file.
#[derive(Default)]
pub struct DumpCache {
    entries: HashMap<PathBuf, (Fingerprint, Arc<Parsed>)>,
}

impl DumpCache {
    /// Reads `dir`'s dumps, parsing again (in parallel) only those whose fingerprint changed;
    /// files gone from the directory leave the cache. A file that cannot be read is a problem,
    /// never a failed scrape.
    pub fn scan(&mut self, dir: &Path) -> Result<Scan, ncclshim_diagnose::ToolError> {
        let listing = ncclshim_diagnose::open_job_dir(dir)?;
        let entries = &self.entries;
        let read: Vec<(PathBuf, Result<Read, Problem>)> = listing
            .files
            .par_iter()
            .map(|p| {
                let r = fingerprint(p)
                    .map_err(|e| Problem {
                        file: display_path(dir, p),
                        error: format!("cannot read: {e}"),
                    })
                    .and_then(|fp| match entries.get(p) {
                        Some((old, m)) if *old == fp => Ok((fp, Arc::clone(m), false)),
                        _ => parse(dir, p).map(|m| (fp, Arc::new(m), true)),
                    });
                (p.clone(), r)
            })
            .collect();
        let mut scan = Scan {
            models: Vec::new(),
            problems: listing.problems,
            files: read.len(),
            parsed: 0,
            changed: false,
        };
        let mut kept = HashMap::with_capacity(read.len());
        for (p, r) in read {
            match r {
                Ok((fp, m, parsed)) => {
                    scan.parsed += usize::from(parsed);
                    scan.models.push(Arc::clone(&m));
                    kept.insert(p, (fp, m));
                }
                Err(problem) => scan.problems.push(problem),
            }
        }
        // Nothing parsed and as many files: the very files of the last scrape.
        scan.changed = scan.parsed > 0 || kept.len() != self.entries.len();
        self.entries = kept;
        Ok(scan)
    }
}

/// One dump as the report reads it, its failed calls counted first.
fn parse(dir: &Path, p: &Path) -> Result<Parsed, Problem> {
    let d = ncclshim_format::reader::read_dump(p).map_err(|e| Problem {
        file: display_path(dir, p),
        error: e.to_string(),
    })?;
    let mut model = ProcessModel::from_dump(&d, display_path(dir, p));
    drop(d);
    let mut failed = FailedCalls::new();
    // NCCL calls only: a CUDA driver call's CUresult is another, larger set, and such a
    // failure surfaces through the NCCL call that made it.
    for c in model.calls.iter().filter(|c| !c.is_cuda && c.failed()) {
        let code = ncclshim_diagnose::names::nccl_result_name(c.rc).unwrap_or("unknown");
        *failed.entry(code).or_default() += 1;
    }
    model.compact(KEEP_OPERATIONS);
    Ok(Parsed { model, failed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// Sets `p`'s mtime back to `t` (what a write through a mapping may leave unchanged).
    fn set_mtime(p: &Path, t: SystemTime) {
        let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
        let times = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        ];
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and an array of two timespecs, as utimensat wants.
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0);
    }

    #[test]
    fn a_changed_ring_head_changes_the_fingerprint_even_with_the_same_mtime_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.ncclshim");
        std::fs::write(&p, vec![0u8; 2 * FINGERPRINT_BYTES]).unwrap();
        let first = fingerprint(&p).unwrap();
        assert_eq!(fingerprint(&p).unwrap(), first, "an unchanged file");
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[4096 + 8] = 1; // a ring directory entry
        std::fs::write(&p, &bytes).unwrap();
        set_mtime(&p, first.mtime.unwrap());
        let second = fingerprint(&p).unwrap();
        assert_eq!((second.len, second.mtime), (first.len, first.mtime));
        assert_ne!(second, first);
    }
}
