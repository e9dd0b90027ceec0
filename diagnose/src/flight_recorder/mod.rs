//! PyTorch Flight Recorder dumps read beside the shim's: PyTorch keeps a per-rank ring of its
//! collectives (state, sizes, dtypes, the Python stack, the process group's name) and writes it
//! as a pickle on a watchdog timeout (`TORCH_FR_DUMP_TEMP_FILE<rank>`). It has what ncclshim
//! lacks (the user's line, process-group names); ncclshim has what it lacks (dumps that survive
//! SIGKILL, NCCL's errors). This module finds and reads those dumps ([`mod@format`] holds their
//! fields), and [`join`] joins them with the shim's processes, or stands in for ranks without
//! the shim, so the same story and verdict judge both.
//!
//! How PyTorch's own analyzer finds them (`fr_trace`, `components/loader.py`): every file of a
//! directory tree whose name is a common prefix followed by the rank (`rank_0`,
//! `nccl_trace_rank_3`); the rank comes from the name only, the dump does not hold it.

pub mod decode;
pub mod dumps;
pub mod format;
pub mod join;
pub mod lazy;
pub mod pickle;
pub mod run_window;
pub mod writers;

use crate::finding::{Evidence, EvidenceKind, Finding, Severity};
use crate::load::{display_path, Listing, Problem};
use crate::model::{JobModel, ProcessModel};
pub use dumps::{has_shim_records, FlightRecorder, ProcessGroup, RankDump};
use format::FrFile;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Format versions whose fields were checked against PyTorch's writer ("2.2" to "2.10"); others
/// are read best effort with one line saying so.
pub const KNOWN_VERSIONS: &[&str] = &[
    "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11",
];

/// Where the dumps are: found in the job directory, or named by a path prefix
/// (`--flight-recorder DIR/rank_`, what `TORCH_FR_DUMP_TEMP_FILE` was set to).
#[derive(Debug, Clone, Default)]
pub enum Source {
    #[default]
    InJobDir,
    Prefix(PathBuf),
    Off,
}

/// Finds and reads the dumps `source` names (nothing for [`Source::Off`]); `listing` is the job
/// directory's.
pub fn load(dir: &Path, source: &Source, listing: &Listing) -> FlightRecorder {
    read_all(dir, list(source, listing), None)
}

/// The dumps `source` names ((path, rank)), none read; `listing` is the job directory's.
pub fn list(source: &Source, listing: &Listing) -> Vec<(PathBuf, u32)> {
    match source {
        Source::Off => Vec::new(),
        Source::InJobDir => find_in_dir(listing),
        Source::Prefix(p) => find_by_prefix(p),
    }
}

/// Whether `source` names any dump (files only, nothing read); `listing` is the job directory's.
pub fn any_in(source: &Source, listing: &Listing) -> bool {
    match source {
        Source::Off => false,
        Source::InJobDir => !find_in_dir(listing).is_empty(),
        Source::Prefix(p) => !find_by_prefix(p).is_empty(),
    }
}

/// Reads `files` ((path, rank)) in parallel, like the shim's dumps. A dump whose entries lie
/// outside `window` (another run's) is listed as a problem and not kept.
pub fn read_all(
    dir: &Path,
    files: Vec<(PathBuf, u32)>,
    window: Option<run_window::RunWindow>,
) -> FlightRecorder {
    let results: Vec<Result<RankDump, Problem>> = files
        .par_iter()
        .map(|(p, rank)| {
            read_dump(p, *rank, display_path(dir, p)).map_err(|error| Problem {
                file: display_path(dir, p),
                error,
            })
        })
        .collect();
    let mut out = FlightRecorder::default();
    for r in results {
        match r {
            Ok(d) => {
                if let Some(why) = window.and_then(|w| w.dump_outside(&d)) {
                    out.other_runs.push(another_runs(d.file.clone(), why));
                    continue;
                }
                if !KNOWN_VERSIONS.contains(&d.version.as_str()) {
                    out.notes.push(format!(
                        "{}: Flight Recorder format version {:?} is not one this ncclshim knows (2.2 to 2.11); read best effort",
                        d.file, d.version
                    ));
                }
                out.dumps.push(d)
            }
            Err(p) => out.problems.push(p),
        }
    }
    out.dumps.sort_by_key(|d| d.rank);
    out
}

/// The problem line of a Flight Recorder dump that belongs to another run.
fn another_runs(file: String, why: String) -> Problem {
    Problem {
        file,
        error: format!("a Flight Recorder dump of another run ({why}); not joined with this one"),
    }
}

impl FlightRecorder {
    /// Adds the dumps and problems of `more` (read later, of other ranks).
    fn merge(&mut self, more: FlightRecorder) {
        self.dumps.extend(more.dumps);
        self.dumps.sort_by_key(|d| d.rank);
        self.problems.extend(more.problems);
        self.other_runs.extend(more.other_runs);
        self.notes.extend(more.notes);
    }
}

/// The rank a dump's file name ends with (`rank_12` is 12), as `fr_trace` reads it.
fn trailing_rank(name: &str) -> Option<u32> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 9 {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

/// Whether a file is a pickle of protocol 2 or later (what `torch` writes: `\x80` then the
/// protocol number).
fn looks_like_pickle(p: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|_| head[0] == 0x80 && (2..=5).contains(&head[1]))
}

/// Dumps among the job directory's files (the listing's other files: up to
/// [`crate::job_dir::OTHER_FILES_DEPTH`] folders down, no link, no hidden folder): files whose
/// name ends in a rank and that either start like a pickle or lie in a folder named like
/// PyTorch's (`flight-recorder`, `fr`, so that a damaged dump there is reported rather than
/// skipped). Our own dumps are not among them.
pub fn find_in_dir(listing: &Listing) -> Vec<(PathBuf, u32)> {
    let mut out: Vec<(PathBuf, u32)> = listing
        .other_files
        .iter()
        .filter_map(|p| {
            let rank = trailing_rank(&p.file_name()?.to_string_lossy())?;
            let fr_folder = p
                .parent()
                .and_then(Path::file_name)
                .and_then(|n| n.to_str())
                .is_some_and(|n| matches!(n, "flight-recorder" | "flight_recorder" | "fr"));
            (fr_folder || looks_like_pickle(p)).then(|| (p.clone(), rank))
        })
        .collect();
    out.sort();
    out
}

/// Dumps named `PREFIX<rank>` (`/tmp/fr/rank_` finds `/tmp/fr/rank_0`, `/tmp/fr/rank_1`...).
pub fn find_by_prefix(prefix: &Path) -> Vec<(PathBuf, u32)> {
    let (parent, stem) = match prefix.file_name().and_then(|s| s.to_str()) {
        // A directory given as the prefix: every rank-named file in it.
        _ if prefix.is_dir() => (prefix.to_path_buf(), String::new()),
        Some(s) => (
            prefix
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            s.to_owned(),
        ),
        None => return Vec::new(),
    };
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, u32)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(stem.as_str())?;
            let rank = trailing_rank(rest)?;
            (rest.len() == rank.to_string().len() || stem.is_empty()).then(|| (e.path(), rank))
        })
        .collect();
    out.sort();
    out
}

/// Reads one dump; the error is one line.
pub fn read_dump(p: &Path, rank: u32, shown: String) -> Result<RankDump, String> {
    let bytes =
        std::fs::read(p).map_err(|e| format!("cannot read this Flight Recorder dump: {e}"))?;
    parse(&bytes, rank, shown)
}

/// Parses a dump's bytes.
pub fn parse(bytes: &[u8], rank: u32, shown: String) -> Result<RankDump, String> {
    if bytes.is_empty() {
        return Err(
            "empty Flight Recorder dump (its rank was stopped while writing it, or never wrote it)"
                .into(),
        );
    }
    let pickle = pickle::parse(bytes).map_err(|e| match e {
        pickle::PickleError::Truncated { .. } => format!(
            "truncated Flight Recorder dump ({} bytes; its writer was stopped while writing it): {e}",
            bytes.len()
        ),
        pickle::PickleError::Invalid(why) => format!("not a readable Flight Recorder dump: {why}"),
    })?;
    let mut f: FrFile = decode::Decoder::new(&pickle, bytes.len())
        .file()
        .map_err(|e| format!("a Flight Recorder dump this ncclshim cannot read: {e}"))?;
    let writer = writers::of_file(&f);
    writers::normalize(writer, &mut f.entries);
    let groups = f
        .pg_config
        .iter()
        .map(|(id, c)| ProcessGroup {
            id: id.clone(),
            name: match c.name.text() {
                n if n.is_empty() => id.clone(),
                n => n,
            },
            desc: c.desc.text(),
            ranks: c.ranks.list().unwrap_or_default(),
        })
        .collect();
    Ok(RankDump {
        file: shown,
        rank,
        version: f.version.text(),
        nccl_version: f.comm_lib_version.text(),
        groups,
        entries: f.entries,
        writer,
    })
}

/// What the report says about the Flight Recorder dumps (`flight_recorder` in the report JSON).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Ranks with a dump: read, or only listed ([`Summary::ranks_listed_only`]).
    pub ranks_with_dump: Vec<u32>,
    /// How many dumps were read (parsed in full).
    pub dumps_read: usize,
    /// How many dumps were only listed, not read: their ranks' shim records match, on every
    /// communicator, those of a rank whose dump was read, which stands for them
    /// ([`lazy`] says why that gives the same verdicts).
    pub dumps_listed_only: usize,
    /// The ranks of those dumps.
    pub ranks_listed_only: Vec<u32>,
    /// Members of the dumps' process groups with no dump, or none that could be read.
    pub ranks_without_dump: Vec<u32>,
    /// Ranks known from their Flight Recorder dump only (no ncclshim dump).
    pub ranks_without_ncclshim: Vec<u32>,
    pub process_groups: Vec<GroupSummary>,
    /// Where each rank's last collective was, mismatches, missing dumps (also quoted in the
    /// primary finding's evidence).
    pub evidence: Vec<Evidence>,
    /// Format versions read best effort.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One process group and the communicator it was joined with.
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    pub name: String,
    pub desc: String,
    /// `0:default_pg`.
    pub label: String,
    pub ranks: Vec<u32>,
    /// The communicator's hash (`0x...`), when a rank with both dumps joined them.
    pub comm_hash: Option<String>,
}

/// The Flight Recorder's part of one analysis: read before the model is built (stand-ins for
/// ranks without the shim join the model), quoted in the report after.
pub struct Joined {
    pub fr: FlightRecorder,
    /// Process group name → communicator hash.
    pub comm_of: BTreeMap<String, u64>,
    pub stand_in_ranks: Vec<u32>,
    /// Where the dumps not read yet are read from (shown relative to it).
    dir: PathBuf,
    /// Dumps listed, not read (yet): [`lazy`].
    listed_only: Vec<(PathBuf, u32)>,
    /// Which read rank stands for which listed-only one, per communicator.
    cover: lazy::Cover,
    /// The reported run's span: dumps read later outside it are another run's.
    window: Option<run_window::RunWindow>,
}

/// Lists the dumps `source` names, reads those the report needs before its model is built
/// ([`lazy::plan`]: every rank without a shim dump, one per class of agreeing shim records) and
/// adds a stand-in process to `parts` for each rank that has a Flight Recorder dump but no shim
/// dump. None when there are no dumps.
pub fn prepare(
    dir: &Path,
    source: &Source,
    listing: &Listing,
    parts: &mut Vec<ProcessModel>,
    window: Option<run_window::RunWindow>,
) -> Option<Joined> {
    let mut files = list(source, listing);
    if files.is_empty() {
        return None;
    }
    // Dumps found in the job directory may be any run's that wrote there; dumps named with
    // `--flight-recorder` are the ones the user chose, whatever their time.
    let window = window.filter(|_| matches!(source, Source::InJobDir));
    // Another run's dumps, by when they were written, are not even read.
    let mut other_runs = Vec::new();
    if let Some(w) = window {
        files.retain(|(path, _)| match w.file_outside(path) {
            Some(why) => {
                other_runs.push(another_runs(display_path(dir, path), why));
                false
            }
            None => true,
        });
    }
    let mut plan = lazy::plan(parts, files);
    if std::env::var_os(lazy::READ_ALL_VAR).is_some() {
        plan.read.append(&mut plan.listed_only);
    }
    let mut fr = read_all(dir, plan.read, window);
    fr.other_runs.append(&mut other_runs);
    let comm_of = join::comms_of_groups(parts, &fr);
    let job_ranks: BTreeSet<u32> = parts
        .iter()
        .filter(|p| has_shim_records(p) || p.has_prof)
        .filter_map(ProcessModel::world_rank)
        .collect();
    let stand_ins = join::stand_ins(&job_ranks, &fr, &comm_of);
    let stand_in_ranks = fr
        .dumps
        .iter()
        .map(|d| d.rank)
        .filter(|r| !job_ranks.contains(r))
        .collect();
    parts.extend(stand_ins);
    Some(Joined {
        fr,
        comm_of,
        stand_in_ranks,
        dir: dir.to_path_buf(),
        listed_only: plan.listed_only,
        cover: plan.cover,
        window,
    })
}

/// A finding naming more ranks than this speaks of classes of ranks (every survivor of a
/// crash): the ranks read for their classes quote its lines, its ranks are not read one by one.
const NAMED_RANKS_READ_PER_FINDING: usize = 64;

/// Reads the listed-only dumps the findings turned out to need ([`lazy`]): the ranks they name,
/// and in each group the ranks no read dump stands for, until none is left.
fn read_what_the_findings_need(findings: &[Finding], joined: &mut Joined) {
    let mut wanted: BTreeSet<u32> = findings
        .iter()
        .filter(|f| f.severity != Severity::Advisory)
        .filter(|f| f.ranks.len() <= NAMED_RANKS_READ_PER_FINDING)
        .flat_map(|f| f.ranks.iter().copied())
        .collect();
    while !joined.listed_only.is_empty() {
        wanted.extend(join::ranks_to_read(
            &joined.fr,
            &joined.comm_of,
            &joined.cover,
            &joined.listed_only,
        ));
        if wanted.is_empty() {
            break;
        }
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut joined.listed_only)
            .into_iter()
            .partition(|(_, r)| wanted.contains(r));
        joined.listed_only = later;
        wanted.clear();
        if now.is_empty() {
            break;
        }
        let more = read_all(&joined.dir, now, joined.window);
        joined.fr.merge(more);
    }
}

/// What the Flight Recorder dumps add to the report, made once the findings are known: the
/// report is built from it (`report::Context`), never edited after.
#[derive(Debug, Clone)]
pub struct Quotes {
    /// The report's `flight_recorder` section.
    pub summary: Summary,
    /// Communicator hash → the labels of the process groups joined with it (`0:default_pg`).
    pub groups_of_comm: BTreeMap<u64, String>,
    /// Where each group's ranks were, quoted after the first finding about a problem.
    pub quoted: Vec<Evidence>,
    /// The processes known from their Flight Recorder dump only: they have no end mark
    /// because the Flight Recorder records none, not because they were killed.
    pub stand_ins: BTreeSet<usize>,
    /// The dumps that could not be read, and other runs' dumps.
    pub problems: Vec<Problem>,
}

/// What the dumps say once the findings are known: the summary, the problem lines,
/// process-group names for the communicators, the per-group evidence quoted in the first
/// finding about a problem, and which processes stand in for ranks without the shim.
pub fn quote(job: &JobModel, findings: &[Finding], mut joined: Joined) -> Quotes {
    read_what_the_findings_need(findings, &mut joined);
    let Joined {
        fr,
        comm_of,
        stand_in_ranks,
        listed_only,
        cover,
        ..
    } = joined;
    let evidence = join::evidence_covering(&fr, &comm_of, &cover);
    let mut groups: BTreeMap<String, ProcessGroup> = BTreeMap::new();
    for d in &fr.dumps {
        for g in &d.groups {
            groups.entry(g.name.clone()).or_insert_with(|| g.clone());
        }
    }
    let groups_of_comm: BTreeMap<u64, String> = job
        .comms
        .keys()
        .filter_map(|&comm| {
            let named: Vec<String> = groups
                .values()
                .filter(|g| {
                    comm_of
                        .get(&g.name)
                        .copied()
                        .unwrap_or_else(|| join::group_hash(g))
                        == comm
                })
                .map(ProcessGroup::label)
                .collect();
            (!named.is_empty()).then(|| (comm, named.join(", ")))
        })
        .collect();
    // Quotes, not new facts about the finding's processes.
    let quoted = evidence
        .iter()
        .filter(|e| e.kind != EvidenceKind::Gap)
        .cloned()
        .collect();
    // A stand-in process is named by its dump's file.
    let files: BTreeSet<&str> = fr.dumps.iter().map(|d| d.file.as_str()).collect();
    let stand_ins = (0..job.processes.len())
        .filter(|&p| files.contains(job.processes[p].host.as_str()))
        .collect();
    let mut problems = fr.problems.clone();
    problems.extend(fr.other_runs.iter().cloned());
    let mut ranks_listed_only: Vec<u32> = listed_only.iter().map(|(_, r)| *r).collect();
    ranks_listed_only.sort_unstable();
    ranks_listed_only.dedup();
    let mut ranks_with_dump = fr.ranks();
    ranks_with_dump.extend(&ranks_listed_only);
    ranks_with_dump.sort_unstable();
    ranks_with_dump.dedup();
    let summary = Summary {
        ranks_without_dump: fr
            .ranks_without_dump()
            .into_iter()
            .filter(|r| ranks_listed_only.binary_search(r).is_err())
            .collect(),
        ranks_with_dump,
        dumps_read: fr.dumps.len() + fr.problems.len(),
        dumps_listed_only: listed_only.len(),
        ranks_listed_only,
        ranks_without_ncclshim: stand_in_ranks,
        process_groups: groups
            .values()
            .map(|g| GroupSummary {
                name: g.name.clone(),
                desc: g.desc.clone(),
                label: g.label(),
                ranks: g.ranks.clone(),
                comm_hash: comm_of.get(&g.name).map(|h| format!("{h:#018x}")),
            })
            .collect(),
        evidence,
        notes: fr.notes.clone(),
    };
    Quotes {
        summary,
        groups_of_comm,
        quoted,
        stand_ins,
        problems,
    }
}

/// The report's "Flight Recorder" section.
pub fn render_text(s: &Summary, bold: &dyn Fn(&str) -> String) -> String {
    let safe = crate::terminal::escape_controls;
    // In runs (`0-8191,8193-16383`): every rank of a large job stays one short line.
    let list = |r: &[u32]| crate::finding::words::rank_list(r);
    let mut o = bold("PyTorch Flight Recorder");
    o.push('\n');
    let mut line = format!("  dumps from ranks {}", list(&s.ranks_with_dump));
    if s.ranks_with_dump.is_empty() {
        line = "  no readable dump".to_owned();
    }
    if !s.ranks_without_dump.is_empty() {
        line.push_str(&format!(
            "; none from ranks {}",
            list(&s.ranks_without_dump)
        ));
    }
    if !s.ranks_without_ncclshim.is_empty() {
        line.push_str(&format!(
            "; ranks {} known from it only (no ncclshim dump)",
            list(&s.ranks_without_ncclshim)
        ));
    }
    o.push_str(&line);
    o.push('\n');
    if s.dumps_listed_only > 0 {
        o.push_str(&format!(
            "  {} dumps read, {} only listed: their ranks' ncclshim records match a read rank's on every communicator, whose dump stands for them\n",
            s.dumps_read, s.dumps_listed_only
        ));
    }
    for e in &s.evidence {
        o.push_str(&format!("  {}\n", safe(&e.text)));
    }
    for n in &s.notes {
        o.push_str(&format!("  note: {}\n", safe(n)));
    }
    o.push('\n');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_names() {
        assert_eq!(trailing_rank("rank_12"), Some(12));
        assert_eq!(trailing_rank("nccl_trace_rank_0"), Some(0));
        assert_eq!(trailing_rank("notes.txt"), None);
    }

    #[test]
    fn garbage_is_one_line() {
        let e = parse(b"\x80\x04garbage", 0, "x".into()).unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        let e = parse(b"", 0, "x".into()).unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }
}
