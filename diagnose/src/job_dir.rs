//! The one walk of a job directory per command: the shim's dumps (in the directory and its
//! direct subdirectories, one per host being a common layout), the other regular files a
//! PyTorch Flight Recorder dump may be among (a few folders deep), and what could not be looked
//! at. The report, its runs and the Flight Recorder all read this listing instead of each
//! walking the directory again.
//!
//! The two kinds of file are looked for as each was before the walks were one: dumps follow
//! symbolic links (a link to a dump or to a host's subdirectory is read; a file reached twice,
//! through a link loop, counts once by device and inode), and an entry that is not a regular file
//! (a FIFO would block a reader forever) or a subdirectory that cannot be listed is a problem,
//! not silence. The Flight Recorder's candidates follow no link and no hidden folder, so a link
//! loop cannot send the walk round, and an unreadable folder below the hosts' level is passed
//! over quietly (it holds no shim dump).

use crate::error::{ToolError, ToolErrorKind};
use std::path::{Path, PathBuf};

/// The name every summary file ends with (`ncclshim summarize -o`).
pub const SUMMARY_FILE_SUFFIX: &str = ".ncclshim-summary";

pub use crate::error::Problem;

/// The path as shown in reports: relative to the job directory when inside it.
pub fn display_path(dir: &Path, p: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).display().to_string()
}

/// How many folders below the job directory other files are looked for: PyTorch's dumps sit
/// in `flight-recorder/` or `fr/` of a job's or a host's folder, seldom deeper
/// (`<job>/<case>/flight-recorder/rank_N`).
pub const OTHER_FILES_DEPTH: usize = 4;

/// The files of a job directory, and what could not be looked at.
#[derive(Debug, Default)]
pub struct Listing {
    /// Regular files with a dump's name, each file once, sorted.
    pub files: Vec<PathBuf>,
    /// Entries that could not be listed or are not regular files (a FIFO named like a dump
    /// would block a reader forever; an unreadable subdirectory would hide dumps silently).
    pub problems: Vec<Problem>,
    /// Every other regular file (not a link, not named like one of our dumps) in the directory
    /// and its non-hidden folders up to [`OTHER_FILES_DEPTH`] deep, unsorted: where
    /// [`crate::flight_recorder::find_in_dir`] looks for PyTorch's dumps.
    pub other_files: Vec<PathBuf>,
    /// Summaries (`crate::summary`) where dumps may lie, each once, sorted.
    pub summaries: Vec<PathBuf>,
}

/// Whether a file is named like one of the shim's dumps.
pub fn is_dump_name(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    // `<host>.<pid>.<start>.<tag>.ncclshim`, or `... .ncclshim.N` when O_EXCL had to pick another
    // name. Compared as bytes: a host name (or a copy's name) that is not UTF-8 is still a dump.
    const SUFFIX: &[u8] = b".ncclshim";
    p.file_name().map(|n| n.as_bytes()).is_some_and(|n| {
        if n.ends_with(SUFFIX) {
            return true;
        }
        let digits = n.iter().rev().take_while(|b| b.is_ascii_digit()).count();
        let rest = &n[..n.len() - digits];
        digits > 0 && rest.ends_with(b".ncclshim.")
    })
}

/// Dump files in `dir` and its direct subdirectories (one per host is a common layout), sorted.
pub fn find_dumps(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    list_dumps(dir).map(|l| l.files)
}

/// Walks `dir` once: its dumps (see [`Listing::files`]), the other files and the problems. A
/// file reached twice (a symbolic link back into the directory, a loop) is listed once, by its
/// shortest path: files are the same when their device and inode are. Fails only when `dir`
/// itself cannot be listed.
pub fn list_dumps(dir: &Path) -> std::io::Result<Listing> {
    use std::os::unix::fs::MetadataExt;
    let entries = std::fs::read_dir(dir)?;
    let mut walk = Walk {
        root: dir,
        candidates: Vec::new(),
        problems: Vec::new(),
        other_files: Vec::new(),
    };
    walk.visit(
        dir,
        entries,
        Wanted {
            depth: 0,
            dumps: true,
            others: true,
        },
    );
    let Walk {
        candidates,
        mut problems,
        other_files,
        ..
    } = walk;
    let mut files = Vec::new();
    let mut summaries = Vec::new();
    for (p, m) in candidates {
        if m.is_file() && is_summary_name(&p) {
            summaries.push((p, m));
        } else if m.is_file() {
            files.push((p, m));
        } else {
            problems.push(Problem {
                file: display_path(dir, &p),
                error: format!("not a regular file ({}); not read", file_type_name(&m)),
            });
        }
    }
    // Shortest path first, so a file reached through a link loop keeps its direct name.
    files.sort_by_cached_key(|(p, _)| (p.components().count(), p.clone()));
    let mut seen = std::collections::HashSet::new();
    files.retain(|(_, m)| seen.insert((m.dev(), m.ino())));
    let mut files: Vec<PathBuf> = files.into_iter().map(|(p, _)| p).collect();
    files.sort();
    summaries.sort_by_cached_key(|(p, _)| (p.components().count(), p.clone()));
    summaries.retain(|(_, m)| seen.insert((m.dev(), m.ino())));
    let mut summaries: Vec<PathBuf> = summaries.into_iter().map(|(p, _)| p).collect();
    summaries.sort();
    problems.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(Listing {
        files,
        problems,
        other_files,
        summaries,
    })
}

/// What a folder is listed for.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    /// Folders below the job directory (0: the job directory).
    depth: usize,
    /// Dumps: in the job directory and its direct subdirectories.
    dumps: bool,
    /// Other files (the Flight Recorder's candidates).
    others: bool,
}

struct Walk<'a> {
    root: &'a Path,
    /// Files with a dump's or a summary's name, with their (followed) metadata.
    candidates: Vec<(PathBuf, std::fs::Metadata)>,
    problems: Vec<Problem>,
    other_files: Vec<PathBuf>,
}

impl Walk<'_> {
    fn problem(&mut self, p: &Path, error: String) {
        self.problems.push(Problem {
            file: display_path(self.root, p),
            error,
        });
    }

    fn visit(&mut self, dir: &Path, entries: std::fs::ReadDir, wanted: Wanted) {
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) if wanted.dumps && wanted.depth == 0 => {
                    self.problem(dir, format!("cannot list: {e}"));
                    continue;
                }
                Err(e) if wanted.dumps => {
                    self.problem(dir, format!("cannot list this subdirectory: {e}"));
                    break;
                }
                Err(_) => continue,
            };
            let path = entry.path();
            let dumps_below = wanted.dumps && self.dump_entry(&path, wanted.depth);
            let others_below = wanted.others && self.other_entry(&entry, &path, wanted.depth);
            if !dumps_below && !others_below {
                continue;
            }
            match std::fs::read_dir(&path) {
                Ok(sub) => self.visit(
                    &path,
                    sub,
                    Wanted {
                        depth: wanted.depth + 1,
                        dumps: dumps_below,
                        others: others_below,
                    },
                ),
                Err(e) if dumps_below => {
                    self.problem(&path, format!("cannot list this subdirectory: {e}"))
                }
                Err(_) => {}
            }
        }
    }

    /// Takes `path` as a dump candidate when it is named like one; returns whether it is a
    /// subdirectory whose dumps are wanted too (only the job directory's own).
    fn dump_entry(&mut self, path: &Path, depth: usize) -> bool {
        let wanted = is_dump_name(path) || is_summary_name(path);
        if depth > 0 && !wanted {
            return false;
        }
        // Follows links: a link to a dump (or to a host's subdirectory) is read.
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                self.problem(path, format!("cannot look at it: {e}"));
                return false;
            }
        };
        if depth == 0 && meta.is_dir() {
            return true;
        }
        if wanted {
            self.candidates.push((path.to_path_buf(), meta));
        }
        false
    }

    /// Keeps `path` when it is another regular file; returns whether it is a folder to look
    /// in for more (not a link, not hidden, not too deep).
    fn other_entry(&mut self, entry: &std::fs::DirEntry, path: &Path, depth: usize) -> bool {
        let Ok(ft) = entry.file_type() else {
            return false;
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ft.is_dir() {
            return depth < OTHER_FILES_DEPTH && !name.starts_with('.');
        }
        if ft.is_file() && !name.contains(".ncclshim") {
            self.other_files.push(path.to_path_buf());
        }
        false
    }
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

/// The job directory walked once ([`list_dumps`]), or why it cannot be: it is not a
/// directory, or it cannot be listed. Whether it holds dumps is [`require_dumps`]'s question.
/// A summary file named instead of a directory is a listing of that summary alone (read it
/// with [`job_dir_of`] as its directory).
pub fn open_job_dir(dir: &Path) -> Result<Listing, ToolError> {
    if dir.is_file() && is_summary_name(dir) {
        return Ok(Listing {
            summaries: vec![dir.to_path_buf()],
            ..Default::default()
        });
    }
    if !dir.is_dir() {
        let what = if dir.exists() {
            "not a directory"
        } else {
            "does not exist"
        };
        return Err(ToolError::new(
            ToolErrorKind::NotADirectory,
            dir,
            format!("{}: {what}", dir.display()),
        ));
    }
    list_dumps(dir).map_err(|e| {
        ToolError::new(
            ToolErrorKind::CannotList,
            dir,
            format!("{}: cannot list: {e}", dir.display()),
        )
    })
}

/// The directory the files of `path` are shown from: the path itself, or the folder of a
/// summary file named alone.
pub fn job_dir_of(path: &Path) -> &Path {
    if path.is_file() && is_summary_name(path) {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    } else {
        path
    }
}

/// Why a listing of `dir` has no dump to read, if it has none.
pub fn require_dumps(dir: &Path, listing: &Listing) -> Result<(), ToolError> {
    let nothing_to_read = listing.files.is_empty() && listing.summaries.is_empty();
    if nothing_to_read && !listing.problems.is_empty() {
        // Only unusable entries (a FIFO named like a dump, an unreadable subdirectory): say
        // which, in one line.
        let p = &listing.problems[0];
        let more = match listing.problems.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        let mut e = ToolError::new(
            ToolErrorKind::NoReadableDumps,
            dir,
            format!(
                "{}: no readable dump files: {}: {}{more}",
                dir.display(),
                p.file,
                p.error
            ),
        );
        e.problems = listing.problems.clone();
        return Err(e);
    }
    if nothing_to_read {
        return Err(ToolError::new(
            ToolErrorKind::NoDumps,
            dir,
            format!(
                "{}: no *.ncclshim dump files here (set NCCLSHIM_DIR for the job, or point at the directory it used)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The job directory walked once, holding dump files, or why there are none to read.
pub fn list_job_dir(dir: &Path) -> Result<Listing, ToolError> {
    let listing = open_job_dir(dir)?;
    require_dumps(dir, &listing)?;
    Ok(listing)
}

/// Whether a file is named like a summary (`ncclshim summarize`'s output, `crate::summary`).
pub fn is_summary_name(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(SUMMARY_FILE_SUFFIX) && n.len() > SUMMARY_FILE_SUFFIX.len())
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
        assert!(!is_dump_name(Path::new("/d/h.1.2.shim.ncclshim.")));
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"/d/h\xff.1.2.shim.ncclshim");
        assert!(is_dump_name(Path::new(odd)));
    }

    /// One walk finds both kinds: the hosts' dumps one level down, PyTorch's files deeper,
    /// and neither through a link loop or a hidden folder.
    #[test]
    fn one_walk_lists_dumps_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("host-a/flight-recorder")).unwrap();
        std::fs::create_dir_all(d.join(".hidden")).unwrap();
        std::fs::write(d.join("h.1.2.shim.ncclshim"), b"x").unwrap();
        std::fs::write(d.join("host-a/h.3.4.shim.ncclshim"), b"x").unwrap();
        std::fs::write(d.join("host-a/flight-recorder/rank_0"), b"x").unwrap();
        std::fs::write(d.join(".hidden/rank_1"), b"x").unwrap();
        std::os::unix::fs::symlink(".", d.join("again")).unwrap();
        let l = list_dumps(d).unwrap();
        assert_eq!(
            l.files,
            vec![
                d.join("h.1.2.shim.ncclshim"),
                d.join("host-a/h.3.4.shim.ncclshim")
            ]
        );
        assert_eq!(l.other_files, vec![d.join("host-a/flight-recorder/rank_0")]);
        assert!(l.problems.is_empty(), "{:?}", l.problems);
    }
}
