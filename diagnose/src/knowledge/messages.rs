//! NCCL's failure messages as data (`knowledge/messages.toml`): what a WARN / ncclGetLastError
//! text means, which subsystem printed it, whether it is a root cause or the echo of another
//! rank's failure, the causes it can have with the recorded facts that tell them apart, and the
//! remedy per cause.
//!
//! Why data: NCCL prints several hundred distinct error formats across its releases
//! (`knowledge/nccl-formats/formats.tsv`, extracted from every release tag by
//! `scripts/extract-nccl-formats.py`). Rules keyed on one text each do not generalise; one
//! classifier over a table that covers every format does, so a failure never seen before still
//! gets a meaning, a subsystem and candidate causes. The coverage test below proves the table
//! matches the extracted formats.
//!
//! [`classify`] takes a text as the recorder captured it (ncclGetLastError's bare message, or log
//! lines with NCCL's `host:pid:tid [dev] file:line NCCL WARN` prefix, possibly several messages)
//! and returns the matching entry with its typed captures (addresses, interfaces, errno texts,
//! CUDA errors...). [`Entry::assess`] ranks the entry's causes against the facts of one process
//! through the [`Facts`] trait, which the model implements.

use regex::{Regex, RegexSet};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{LazyLock, OnceLock};

/// What a captured value is, so the report can resolve it against the recorded facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureKind {
    /// `10.0.0.2<45763>`, `[fe80::1%eth0]:1234`, `host<port>`.
    SocketAddress,
    Interface,
    IbDevice,
    IbPort,
    /// strerror() text, e.g. `Connection refused`.
    ErrnoText,
    ErrnoValue,
    /// cudaGetErrorString / cuGetErrorString text.
    CudaErrorText,
    CudaErrorCode,
    Function,
    Rank,
    RankCount,
    CudaDevice,
    PciBusId,
    Path,
    Bytes,
    NcclResult,
    EnvVar,
    IbvWcStatus,
    IbVendorError,
    NcclVersion,
    Name,
    Value,
}

/// How a message relates to the job's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The failure itself.
    Root,
    /// The echo of a failure elsewhere (peer exited, connection closed): never outranks a root cause.
    Consequence,
    /// Noise printed while aborting or destroying after an earlier error.
    Teardown,
    /// NCCL warned and carried on.
    NonFatal,
    /// An internal inconsistency of NCCL or a plugin.
    Internal,
}

impl Role {
    /// Consequences and teardown noise follow from another failure.
    pub fn is_consequence(self) -> bool {
        matches!(self, Role::Consequence | Role::Teardown)
    }
}

/// Numeric facts of a process and its host a cause can depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostNumber {
    DevShmBytes,
    MemlockSoftBytes,
    /// NVSwitch devices the host exposes (an HGX/DGX NVLink fabric when > 0).
    NvswitchDevices,
    /// GPUs the NVIDIA kernel driver lists on the host.
    DriverGpus,
    /// NCCL operations of this process whose call returned before it failed: a long healthy
    /// history tells a link that failed mid-run from a setup that never worked.
    OperationsCompleted,
}

/// Boolean host facts a cause can depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostFlag {
    MemlockUnlimited,
    LibibverbsDlopen,
    DevInfiniband,
    IbDevices,
    InContainer,
    PeermemLoaded,
    /// A recorded IB port runs over Ethernet (RoCE).
    Roce,
    /// On a RoCE port, the GID NCCL selects (NCCL_IB_GID_INDEX, index 0 when unset before
    /// NCCL 2.21 auto-selected) is link-local (`fe80::`) or absent: not routable across subnets.
    SelectedGidLinkLocal,
    /// A recorded IB port is not ACTIVE.
    IbPortDown,
    /// The process may create files in `/dev/shm` (write and search for its effective ids).
    DevShmWritable,
}

/// What a cause's conditions are evaluated against: the recorded facts of one process.
/// `None` everywhere means "not recorded" — an unknown fact is never evidence either way.
pub trait Facts {
    /// `None`: the environment was not recorded; `Some(None)`: recorded and unset.
    fn env(&self, name: &str) -> Option<Option<String>>;
    fn host_number(&self, fact: HostNumber) -> Option<u64>;
    fn host_flag(&self, fact: HostFlag) -> Option<bool>;
    /// Whether `value` (an interface name or an address) belongs to this process's host.
    fn local_interface(&self, value: &str) -> Option<bool>;
    /// NCCL's version code (22703 for 2.27.3).
    fn nccl_version(&self) -> Option<u64>;
    /// Paths of the libraries the process had loaded; `None` when not recorded.
    fn libraries(&self) -> Option<Vec<String>>;
    /// Names of the calls (NCCL and CUDA driver) that failed in the process; `None` when the
    /// process's calls were not recorded.
    fn failed_calls(&self) -> Option<Vec<String>>;
}

/// One condition of a cause, compiled.
#[derive(Debug, Clone)]
pub enum Condition {
    EnvSet(String),
    EnvUnset(String),
    EnvEquals(String, String),
    CaptureMatches(String, Regex),
    CaptureLocal(String, bool),
    HostBelow(HostNumber, u64),
    HostAtLeast(HostNumber, u64),
    HostIs(HostFlag, bool),
    /// A loaded library's path matches.
    Library(Regex),
    /// A call whose name matches failed in the process (the failing call's context).
    FailedCall(Regex),
    NcclBelow(u64),
    NcclAtLeast(u64),
}

impl Condition {
    /// `Some(true)` holds, `Some(false)` ruled out, `None` unknown.
    fn eval(&self, m: &Match, facts: &dyn Facts) -> Option<bool> {
        match self {
            Condition::EnvSet(k) => facts.env(k).map(|v| v.is_some()),
            Condition::EnvUnset(k) => facts.env(k).map(|v| v.is_none()),
            Condition::EnvEquals(k, want) => facts
                .env(k)
                .map(|v| v.is_some_and(|v| v.eq_ignore_ascii_case(want))),
            Condition::CaptureMatches(name, re) => m.capture(name).map(|v| re.is_match(v)),
            Condition::CaptureLocal(name, want) => m
                .capture(name)
                .and_then(|v| facts.local_interface(v))
                .map(|local| local == *want),
            Condition::HostBelow(f, limit) => facts.host_number(*f).map(|v| v < *limit),
            Condition::HostAtLeast(f, n) => facts.host_number(*f).map(|v| v >= *n),
            Condition::Library(re) => facts.libraries().map(|l| l.iter().any(|p| re.is_match(p))),
            Condition::FailedCall(re) => facts
                .failed_calls()
                .map(|l| l.iter().any(|c| re.is_match(c))),
            Condition::HostIs(f, want) => facts.host_flag(*f).map(|v| v == *want),
            Condition::NcclBelow(code) => facts.nccl_version().map(|v| v < *code),
            Condition::NcclAtLeast(code) => facts.nccl_version().map(|v| v >= *code),
        }
    }

    /// The recorded value this condition read, for evidence lines (`NCCL_SOCKET_IFNAME=eth9`,
    /// `dev_shm_bytes = 64 MiB`); `None` when it was not recorded.
    pub fn observed(&self, m: &Match, facts: &dyn Facts) -> Option<String> {
        Some(match self {
            Condition::EnvSet(k) | Condition::EnvUnset(k) | Condition::EnvEquals(k, _) => {
                match facts.env(k)? {
                    Some(v) => format!("{k}={v}"),
                    None => format!("{k} unset"),
                }
            }
            Condition::CaptureMatches(n, _) => format!("{n} '{}'", m.capture(n)?),
            Condition::CaptureLocal(n, _) => {
                let v = m.capture(n)?;
                if facts.local_interface(v)? {
                    format!("{v} is on this host")
                } else {
                    format!("{v} is not an interface of this host")
                }
            }
            Condition::HostBelow(f, _) | Condition::HostAtLeast(f, _) => {
                let v = facts.host_number(*f)?;
                if f.is_bytes() {
                    format!("{} = {} MiB", f.name(), v >> 20)
                } else {
                    format!("{} = {v}", f.name())
                }
            }
            Condition::Library(re) => match facts.libraries()?.iter().find(|p| re.is_match(p)) {
                Some(p) => format!("loaded {p}"),
                None => format!("no library matching '{}' loaded", bare_regex(re)),
            },
            Condition::FailedCall(re) => {
                match facts.failed_calls()?.iter().find(|c| re.is_match(c)) {
                    Some(c) => format!("{c} failed"),
                    None => format!("no call matching '{}' failed", bare_regex(re)),
                }
            }
            Condition::HostIs(f, _) => format!("{} = {}", f.name(), facts.host_flag(*f)?),
            Condition::NcclBelow(_) | Condition::NcclAtLeast(_) => {
                format!("NCCL {}", version_text(facts.nccl_version()?))
            }
        })
    }
}

/// A condition's regex as written in the file (without the case-insensitive flag).
fn bare_regex(re: &Regex) -> &str {
    re.as_str().trim_start_matches("(?i)")
}

impl HostNumber {
    pub fn name(self) -> &'static str {
        match self {
            HostNumber::DevShmBytes => "dev_shm_bytes",
            HostNumber::MemlockSoftBytes => "memlock_soft_bytes",
            HostNumber::NvswitchDevices => "nvswitch_devices",
            HostNumber::DriverGpus => "driver_gpus",
            HostNumber::OperationsCompleted => "operations_completed",
        }
    }

    fn is_bytes(self) -> bool {
        matches!(self, HostNumber::DevShmBytes | HostNumber::MemlockSoftBytes)
    }
}

impl HostFlag {
    pub fn name(self) -> &'static str {
        match self {
            HostFlag::MemlockUnlimited => "memlock_unlimited",
            HostFlag::LibibverbsDlopen => "libibverbs_dlopen",
            HostFlag::DevInfiniband => "dev_infiniband",
            HostFlag::IbDevices => "ib_devices",
            HostFlag::InContainer => "in_container",
            HostFlag::PeermemLoaded => "peermem_loaded",
            HostFlag::Roce => "roce",
            HostFlag::SelectedGidLinkLocal => "selected_gid_link_local",
            HostFlag::IbPortDown => "ib_port_down",
            HostFlag::DevShmWritable => "dev_shm_writable",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Cause {
    pub id: String,
    pub remedy: String,
    pub catalog: Vec<String>,
    pub when: Vec<Condition>,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub id: String,
    pub subsystem: String,
    pub role: Role,
    pub meaning: String,
    /// What the failure is, in a user's words, leading the finding's title (`GPU memory
    /// exhausted`); absent: the title is the call and NCCL's text alone.
    pub headline: Option<String>,
    pub catalog: Vec<String>,
    pub patterns: Vec<Pattern>,
    pub causes: Vec<Cause>,
}

/// One of an entry's patterns, compiled on first use. The file's patterns are all checked when
/// it is loaded (the [`RegexSet`] compiles them, their capture names are read from their syntax
/// tree), but compiling each one again on its own cost two thirds of loading the file, on every
/// run that classified a message, when a run only ever needs the few that matched. A clone keeps
/// the compiled regex when there is one (`OnceLock<Regex>` clones its contents).
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    compiled: OnceLock<Regex>,
}

impl Pattern {
    /// The compiled pattern.
    pub fn regex(&self) -> &Regex {
        self.compiled.get_or_init(|| {
            // Cannot fail: the same text compiled in the file's RegexSet when it was loaded.
            Regex::new(&self.source).expect("pattern compiled in the RegexSet")
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }
}

/// The names of the capture groups of a regex (its syntax tree only: no compilation).
fn capture_names(pattern: &str) -> Result<Vec<String>, String> {
    use regex_syntax::ast::{self, Ast, Visitor};
    struct Names(Vec<String>);
    impl Visitor for Names {
        type Output = Vec<String>;
        type Err = std::convert::Infallible;
        fn finish(self) -> Result<Vec<String>, Self::Err> {
            Ok(self.0)
        }
        fn visit_pre(&mut self, a: &Ast) -> Result<(), Self::Err> {
            if let Ast::Group(g) = a {
                if let ast::GroupKind::CaptureName { name, .. } = &g.kind {
                    self.0.push(name.name.clone());
                }
            }
            Ok(())
        }
    }
    let tree = ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| e.to_string())?;
    ast::visit(&tree, Names(Vec::new())).map_err(|e| match e {})
}

/// How well one cause fits the recorded facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fit {
    /// Every condition holds (at least one).
    Supported,
    /// No condition is contradicted; some are unknown, or the cause has none (the default).
    Possible,
    /// A condition is contradicted by a recorded fact.
    RuledOut,
}

/// One cause with its verdict and the facts that decided it.
#[derive(Debug, Clone)]
pub struct Assessment<'a> {
    pub cause: &'a Cause,
    pub fit: Fit,
    /// (recorded fact, whether the condition on it holds) for every condition whose fact was
    /// recorded.
    pub facts: Vec<(String, bool)>,
}

impl Entry {
    /// The entry's causes ranked against one process's facts: supported first, then possible
    /// (in file order, so the default cause comes after the specific ones), ruled out last.
    pub fn assess<'a>(&'a self, m: &Match, facts: &dyn Facts) -> Vec<Assessment<'a>> {
        let mut out: Vec<Assessment> = self
            .causes
            .iter()
            .map(|c| {
                let mut known = Vec::new();
                let mut fit = if c.when.is_empty() {
                    Fit::Possible
                } else {
                    Fit::Supported
                };
                for cond in &c.when {
                    let seen = || cond.observed(m, facts).unwrap_or_default();
                    match cond.eval(m, facts) {
                        Some(true) => known.push((seen(), true)),
                        Some(false) => {
                            known.push((seen(), false));
                            fit = Fit::RuledOut;
                        }
                        None if fit == Fit::Supported => fit = Fit::Possible,
                        None => {}
                    }
                }
                Assessment {
                    cause: c,
                    fit,
                    facts: known,
                }
            })
            .collect();
        out.sort_by_key(|a| a.fit);
        out
    }
}

/// A value NCCL put into its message, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub name: String,
    pub kind: CaptureKind,
    pub value: String,
}

/// A classified message.
#[derive(Debug, Clone)]
pub struct Match {
    pub entry: &'static Entry,
    /// The single message (prefix stripped) the entry matched.
    pub message: String,
    pub captures: Vec<Capture>,
}

impl Match {
    pub fn capture(&self, name: &str) -> Option<&str> {
        self.captures
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value.as_str())
    }

    pub fn of_kind(&self, kind: CaptureKind) -> impl Iterator<Item = &Capture> {
        self.captures.iter().filter(move |c| c.kind == kind)
    }
}

/// The whole table, compiled: one RegexSet over every pattern picks the entry, the pattern's
/// own regex extracts the captures.
pub struct Messages {
    pub entries: Vec<Entry>,
    pub capture_kinds: BTreeMap<String, CaptureKind>,
    set: RegexSet,
    /// Pattern index in `set` → (entry index, pattern index in the entry).
    owner: Vec<(usize, usize)>,
}

// ----- the file's shape -------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    captures: BTreeMap<String, CaptureKind>,
    entry: Vec<RawEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    id: String,
    subsystem: String,
    role: Role,
    meaning: String,
    #[serde(default)]
    headline: Option<String>,
    #[serde(default)]
    catalog: Vec<String>,
    patterns: Vec<String>,
    #[serde(default)]
    cause: Vec<RawCause>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCause {
    id: String,
    remedy: String,
    #[serde(default)]
    catalog: Vec<String>,
    #[serde(default)]
    when: Vec<RawCondition>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    env: Option<String>,
    equals: Option<String>,
    set: Option<bool>,
    capture: Option<String>,
    matches: Option<String>,
    local_interface: Option<bool>,
    host: Option<String>,
    below: Option<u64>,
    at_least: Option<u64>,
    is: Option<bool>,
    nccl_below: Option<String>,
    nccl_at_least: Option<String>,
    library: Option<String>,
    failed_call: Option<String>,
}

/// `2.27.3` → 22703 (NCCL_VERSION_CODE for 2.x).
pub fn version_code(text: &str) -> Option<u64> {
    let mut it = text.split('.').map(|p| p.parse::<u64>().ok());
    let (maj, min, patch) = (it.next()??, it.next()??, it.next().flatten().unwrap_or(0));
    Some(maj * 10000 + min * 100 + patch)
}

fn version_text(code: u64) -> String {
    format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
}

/// Catalog case ids are C01..C35 (failure-catalog.md).
fn valid_catalog_id(id: &str) -> bool {
    id.strip_prefix('C')
        .filter(|n| n.len() == 2)
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| (1..=35).contains(&n))
}

fn condition(
    raw: RawCondition,
    captures: &BTreeMap<String, CaptureKind>,
) -> Result<Condition, String> {
    let RawCondition {
        env,
        equals,
        set,
        capture,
        matches,
        local_interface,
        host,
        below,
        at_least,
        is,
        nccl_below,
        nccl_at_least,
        library,
        failed_call,
    } = raw;
    let version = |v: String| version_code(&v).ok_or(format!("bad NCCL version {v:?}"));
    let regex = |what: &str, re: String| {
        Regex::new(&format!("(?i){re}")).map_err(|e| format!("{what} {re:?}: {e}"))
    };
    match (library, failed_call) {
        (Some(re), None) if env.is_none() && capture.is_none() && host.is_none() => {
            return regex("library", re).map(Condition::Library)
        }
        (None, Some(re)) if env.is_none() && capture.is_none() && host.is_none() => {
            return regex("failed_call", re).map(Condition::FailedCall)
        }
        (None, None) => {}
        _ => return Err("library / failed_call stand alone in a condition".into()),
    }
    match (env, capture, host, nccl_below, nccl_at_least) {
        (Some(k), None, None, None, None) => match (equals, set) {
            (Some(v), None) => Ok(Condition::EnvEquals(k, v)),
            (None, Some(false)) => Ok(Condition::EnvUnset(k)),
            (None, None | Some(true)) => Ok(Condition::EnvSet(k)),
            _ => Err(format!("env {k}: equals and set together")),
        },
        (None, Some(name), None, None, None) => {
            if !captures.contains_key(&name) {
                return Err(format!("condition on undeclared capture {name:?}"));
            }
            match (matches, local_interface) {
                (Some(re), None) => match Regex::new(&format!("(?i){re}")) {
                    Ok(r) => Ok(Condition::CaptureMatches(name, r)),
                    Err(e) => Err(format!("capture {name}: {e}")),
                },
                (None, Some(l)) => Ok(Condition::CaptureLocal(name, l)),
                _ => Err(format!(
                    "capture {name}: give exactly one of matches / local_interface"
                )),
            }
        }
        (None, None, Some(h), None, None) => {
            let fact = toml::Value::String(h.clone());
            let number = |fact| {
                HostNumber::deserialize(fact).map_err(|_| format!("unknown numeric host fact {h:?}"))
            };
            match (below, at_least, is) {
                (Some(n), None, None) => number(fact).map(|f| Condition::HostBelow(f, n)),
                (None, Some(n), None) => number(fact).map(|f| Condition::HostAtLeast(f, n)),
                (None, None, Some(b)) => HostFlag::deserialize(fact)
                    .map(|f| Condition::HostIs(f, b))
                    .map_err(|_| format!("unknown boolean host fact {h:?}")),
                _ => Err(format!("host {h}: give exactly one of below / at_least / is")),
            }
        }
        (None, None, None, Some(v), None) => Ok(Condition::NcclBelow(version(v)?)),
        (None, None, None, None, Some(v)) => Ok(Condition::NcclAtLeast(version(v)?)),
        _ => Err(
            "a condition names exactly one of env / capture / host / nccl_below / nccl_at_least / library / failed_call"
                .into(),
        ),
    }
}

/// Parses and validates the file: regexes compile, every capture is declared, ids are unique,
/// every entry has a pattern and a cause, every cause a remedy, catalog ids exist.
pub fn load(text: &str) -> Result<Messages, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    let mut ids = HashSet::new();
    let mut all_patterns = Vec::new();
    let mut owner = Vec::new();
    for (ei, raw) in file.entry.into_iter().enumerate() {
        let ctx = |m: String| format!("entry {}: {m}", raw.id);
        if !ids.insert(raw.id.clone()) {
            return Err(ctx("duplicate id".into()));
        }
        if raw.patterns.is_empty() || raw.cause.is_empty() || raw.meaning.trim().is_empty() {
            return Err(ctx("needs a meaning, patterns and causes".into()));
        }
        let mut patterns = Vec::new();
        for (pi, p) in raw.patterns.iter().enumerate() {
            let names = capture_names(p).map_err(|e| ctx(format!("pattern {p:?}: {e}")))?;
            for name in &names {
                if !file.captures.contains_key(name) {
                    return Err(ctx(format!(
                        "capture {name:?} is not declared in [captures]"
                    )));
                }
            }
            all_patterns.push(p.clone());
            owner.push((ei, pi));
            patterns.push(Pattern {
                source: p.clone(),
                compiled: OnceLock::new(),
            });
        }
        let mut causes = Vec::new();
        let mut cause_ids = HashSet::new();
        for c in raw.cause {
            if !cause_ids.insert(c.id.clone()) {
                return Err(ctx(format!("duplicate cause {}", c.id)));
            }
            if c.remedy.trim().is_empty() {
                return Err(ctx(format!("cause {} has no remedy", c.id)));
            }
            let when = c
                .when
                .into_iter()
                .map(|w| condition(w, &file.captures))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ctx(format!("cause {}: {e}", c.id)))?;
            causes.push(Cause {
                id: c.id,
                remedy: c.remedy,
                catalog: c.catalog,
                when,
            });
        }
        let catalog_ids = raw
            .catalog
            .iter()
            .chain(causes.iter().flat_map(|c| &c.catalog));
        if let Some(bad) = catalog_ids.into_iter().find(|c| !valid_catalog_id(c)) {
            return Err(ctx(format!("unknown catalog case {bad:?}")));
        }
        entries.push(Entry {
            id: raw.id,
            subsystem: raw.subsystem,
            role: raw.role,
            meaning: raw.meaning,
            headline: raw.headline,
            catalog: raw.catalog,
            patterns,
            causes,
        });
    }
    let set = RegexSet::new(&all_patterns).map_err(|e| e.to_string())?;
    Ok(Messages {
        entries,
        capture_kinds: file.captures,
        set,
        owner,
    })
}

static MESSAGES: LazyLock<Messages> = LazyLock::new(|| {
    load(include_str!("../../knowledge/messages.toml"))
        .unwrap_or_else(|e| panic!("diagnose/knowledge/messages.toml is malformed: {e}"))
});

pub fn messages() -> &'static Messages {
    &MESSAGES
}

pub fn entry(id: &str) -> Option<&'static Entry> {
    MESSAGES.entries.iter().find(|e| e.id == id)
}

/// The single messages of a text: one per line, with NCCL's log prefix
/// (`host:pid:tid [dev] file.cc:123 NCCL WARN `) and framework wrappers (`Last error:`) removed.
pub fn messages_in(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        // A line can hold several WARNs when a framework joined them.
        for part in line.split(" NCCL WARN ").filter(|p| !p.trim().is_empty()) {
            let part = part.trim();
            let part = part.strip_prefix("NCCL WARN ").unwrap_or(part);
            let part = part.strip_prefix("Last error:").unwrap_or(part).trim();
            if !part.is_empty() {
                out.push(part);
            }
        }
    }
    out
}

/// Distinct messages classified and remembered at most: a rank that retried a failing call
/// thousands of times repeats one text (and ranks of one job repeat each other's); past this
/// many the memory starts afresh, so a long-lived reader (the exporter) stays bounded.
const CLASSIFIED_KEPT: usize = 65_536;

/// Classifies one message (no prefix): the first entry in file order with a matching pattern.
/// Remembered per text: matching runs every pattern of the table at once (`RegexSet`, the
/// overlapping search), about a millisecond per message, which 1,024 retries of one failing
/// call on each of 1,024 ranks turned into CPU-minutes.
pub fn classify_message(message: &str) -> Option<Match> {
    static SEEN: LazyLock<std::sync::Mutex<std::collections::HashMap<String, Option<Match>>>> =
        LazyLock::new(Default::default);
    // A poisoned lock only means another thread panicked mid-insert: the map is still whole.
    if let Some(known) = SEEN.lock().unwrap_or_else(|p| p.into_inner()).get(message) {
        return known.clone();
    }
    let found = classify_uncached(message);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() >= CLASSIFIED_KEPT {
        seen.clear();
    }
    seen.insert(message.to_owned(), found.clone());
    found
}

fn classify_uncached(message: &str) -> Option<Match> {
    let m = &*MESSAGES;
    let first = m.set.matches(message).into_iter().next()?;
    let (ei, pi) = m.owner[first];
    let entry = &m.entries[ei];
    let pattern = entry.patterns[pi].regex();
    let caps = pattern.captures(message)?;
    let captures = pattern
        .capture_names()
        .flatten()
        .filter_map(|name| {
            let v = caps.name(name)?.as_str().trim();
            (!v.is_empty()).then(|| Capture {
                name: name.to_owned(),
                kind: m.capture_kinds[name],
                value: v.to_owned(),
            })
        })
        .collect();
    Some(Match {
        entry,
        message: message.to_owned(),
        captures,
    })
}

/// Every classified message of a text, in order.
pub fn classify_all(text: &str) -> Vec<Match> {
    messages_in(text)
        .into_iter()
        .filter_map(classify_message)
        .collect()
}

/// The message that best explains a text: the first root message if there is one, else the first
/// internal one, else the first non-fatal one, else the first consequence. Texts often hold a
/// consequence ("connection closed") after the message that caused it, teardown noise after
/// both, or a warning NCCL carried on from ("Failed to open libibverbs", then a socket fallback)
/// before the failure itself.
pub fn classify(text: &str) -> Option<Match> {
    let all = classify_all(text);
    let first = |role: Role| all.iter().position(|m| m.entry.role == role);
    let i = first(Role::Root)
        .or_else(|| first(Role::Internal))
        .or_else(|| first(Role::NonFatal))
        .or((!all.is_empty()).then_some(0))?;
    all.into_iter().nth(i)
}

// ----- the extracted formats --------------------------------------------------------------------

/// One NCCL format string and where/when it appears (`knowledge/nccl-formats/formats.tsv`).
#[derive(Debug, Clone)]
pub struct Format {
    pub text: String,
    pub subsystems: Vec<String>,
    pub files: Vec<String>,
    pub versions: BTreeSet<String>,
}

static FORMATS_TSV: &str = include_str!("../../knowledge/nccl-formats/formats.tsv");

/// Versions in release order, from the file's header.
pub fn format_versions() -> Vec<String> {
    FORMATS_TSV
        .lines()
        .find_map(|l| l.strip_prefix("# versions in order: "))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Every extracted format, with its `a..b` version runs expanded.
pub fn formats() -> Vec<Format> {
    let order = format_versions();
    let unescape = |s: &str| {
        s.replace("\\n", "\n")
            .replace("\\t", "\t")
            .replace("\\\\", "\\")
    };
    FORMATS_TSV
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            let [text, subs, files, _macro, vers] = cols[..] else {
                return None;
            };
            let mut versions = BTreeSet::new();
            for run in vers.split(',') {
                let (a, b) = run.split_once("..").unwrap_or((run, run));
                let (ia, ib) = (
                    order.iter().position(|v| v == a)?,
                    order.iter().position(|v| v == b)?,
                );
                versions.extend(order[ia..=ib].iter().cloned());
            }
            Some(Format {
                text: unescape(text),
                subsystems: subs.split(',').map(str::to_owned).collect(),
                files: files
                    .split(',')
                    .filter(|f| *f != "-")
                    .map(str::to_owned)
                    .collect(),
                versions,
            })
        })
        .collect()
}

/// A text NCCL could print for `format`: each printf conversion replaced by a plausible value
/// (the coverage test classifies these, so it exercises the same path as real texts).
pub fn instantiate(format: &str) -> String {
    static CONV: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"%[-+ #0]*[0-9*]*(?:\.[0-9*]+)?(?:hh|h|ll|l|z|j|t)?([diouxXeEfgGcspm%])")
            .expect("conversion regex")
    });
    CONV.replace_all(format, |c: &regex::Captures| {
        match &c[1] {
            "d" | "i" | "u" => "42",
            "o" => "7",
            "x" | "X" => "1a",
            "e" | "E" | "f" | "g" | "G" => "1.5",
            "c" => "c",
            "p" => "0x7f10",
            "m" => "Cannot allocate memory",
            "%" => "%",
            _ => "val",
        }
        .to_owned()
    })
    .into_owned()
}

/// Versions whose formats classify to `entry_id` (derived from the extracted formats).
pub fn versions_printing(entry_id: &str) -> BTreeSet<String> {
    formats()
        .into_iter()
        .filter(|f| classify_message(&instantiate(&f.text)).is_some_and(|m| m.entry.id == entry_id))
        .flat_map(|f| f.versions)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A `/dev/shm` size condition in a cause is the shared threshold (knowledge/thresholds.toml),
    /// so `doctor`, the C07 rule and the message knowledge call the same size small.
    #[test]
    fn dev_shm_conditions_use_the_shared_threshold() {
        let text = include_str!("../../knowledge/messages.toml");
        let min = crate::knowledge::thresholds::thresholds().dev_shm.min_bytes;
        let mut seen = 0;
        for line in text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter(|l| l.contains("\"dev_shm_bytes\"") && l.contains("below"))
        {
            seen += 1;
            assert!(line.contains(&format!("below = {min}")), "{line}");
        }
        assert!(seen > 0);
    }

    /// The subsystems whose formats must all be classified (issue 12's acceptance).
    const CORE: &[&str] = &[
        "bootstrap",
        "init",
        "transport",
        "transport/net",
        "ib",
        "socket",
        "shm",
        "p2p",
        "nvls",
        "collnet",
        "proxy",
        "cuda",
    ];

    /// Texts as real captures recorded them, cut short or from the framework, still classify
    /// as the entry the rules name them by (`rules::text_is_entry`).
    #[test]
    fn real_texts_cut_short_or_from_the_framework_classify() {
        let id = |t: &str| classify_message(t).map(|m| m.entry.id.clone());
        // mr-version (2026-11-27): rank 1's text as its dump holds it.
        let cut = "NCCL version mismatch with remote peer 127.0.0.1<39488> (local: 22803, remot";
        assert_eq!(id(cut).as_deref(), Some("init-version-mismatch"));
        let whole =
            "NCCL version mismatch with remote peer 10.0.0.2<4000> (local: 22803, remote 22809)";
        let m = classify_message(whole).expect("classified");
        assert_eq!(m.entry.id, "init-version-mismatch");
        assert!(m
            .captures
            .iter()
            .any(|c| c.name == "peer_version" && c.value == "22809"));
        assert_eq!(
            id("Unable to load NCCL library. Multi-GPU collectives will not work.").as_deref(),
            Some("libnccl-not-loadable")
        );
        assert_eq!(
            id("libnccl.so.2: cannot open shared object file: No such file or directory")
                .as_deref(),
            Some("libnccl-not-loadable")
        );
    }

    #[test]
    fn file_loads_and_validates() {
        let m = messages();
        assert!(m.entries.len() >= 60, "{} entries", m.entries.len());
        for e in &m.entries {
            assert!(!e.causes.is_empty(), "{}", e.id);
        }
    }

    #[test]
    fn validation_rejects_bad_files() {
        let base = |extra: &str| {
            format!(
                "[captures]\naddr = \"socket_address\"\n[[entry]]\nid = \"a\"\nsubsystem = \"s\"\nrole = \"root\"\nmeaning = \"m\"\npatterns = ['x']\n{extra}"
            )
        };
        assert!(load(&base("[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\n")).is_ok());
        // No cause, no remedy, bad regex, undeclared capture, unknown catalog case, bad condition.
        assert!(load(&base("")).is_err());
        assert!(load(&base("[[entry.cause]]\nid = \"c\"\nremedy = \" \"\n")).is_err());
        assert!(load(&base(
            "[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\ncatalog = [\"C99\"]\n"
        ))
        .is_err());
        assert!(load(&base(
            "[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\nwhen = [{ host = \"nope\", is = true }]\n"
        ))
        .is_err());
        assert!(load(&base(
            "[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\nwhen = [{ capture = \"zz\", matches = \"x\" }]\n"
        ))
        .is_err());
        // The library / failed-call / at_least conditions: valid alone, refused when mixed or
        // when the regex or the fact is bad.
        let when = |w: &str| {
            load(&base(&format!(
                "[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\nwhen = [{w}]\n"
            )))
        };
        assert!(when("{ library = \"libnccl-net\" }").is_ok());
        assert!(when("{ failed_call = \"^cuMulticast\" }").is_ok());
        assert!(when("{ host = \"operations_completed\", at_least = 1000 }").is_ok());
        assert!(when("{ library = \"(\" }").is_err());
        assert!(when("{ library = \"x\", env = \"A\" }").is_err());
        assert!(when("{ host = \"roce\", at_least = 1 }").is_err());
        assert!(when("{ host = \"driver_gpus\", at_least = 3, below = 9 }").is_err());
        let bad_re =
            base("[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\n").replace("['x']", "['(']");
        assert!(load(&bad_re).is_err());
        let undeclared = base("[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\n")
            .replace("['x']", "['(?P<nope>x)']");
        assert!(load(&undeclared).is_err());
        let dup = format!(
            "{}[[entry]]\nid = \"a\"\nsubsystem = \"s\"\nrole = \"root\"\nmeaning = \"m\"\npatterns = ['y']\n[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\n",
            base("[[entry.cause]]\nid = \"c\"\nremedy = \"r\"\n")
        );
        assert!(load(&dup)
            .err()
            .unwrap_or_default()
            .contains("duplicate id"));
    }

    /// Every extracted format, filled with values, is classified: all of the core subsystems,
    /// at least 90% overall. Prints what is not.
    #[test]
    fn coverage_of_extracted_formats() {
        let formats = formats();
        assert!(formats.len() > 800, "{} formats", formats.len());
        let mut per_sub: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut missed = Vec::new();
        let mut no_text = 0;
        let mut classified = 0;
        for f in &formats {
            // A format that is only conversions ("%s") carries no text of NCCL's own.
            if instantiate(&f.text)
                .chars()
                .all(|c| !c.is_alphabetic() || "val".contains(c))
            {
                no_text += 1;
                continue;
            }
            let hit = classify_message(&instantiate(&f.text)).is_some();
            classified += usize::from(hit);
            for s in &f.subsystems {
                let e = per_sub.entry(s.clone()).or_default();
                e.0 += usize::from(hit);
                e.1 += 1;
            }
            if !hit {
                missed.push(format!("{:?} {}", f.subsystems, f.text));
            }
        }
        let total = formats.len() - no_text;
        eprintln!("classified {classified}/{total} formats ({no_text} without text of their own)");
        for (s, (h, t)) in &per_sub {
            eprintln!("  {s:<16} {h}/{t}");
        }
        for m in &missed {
            eprintln!("unclassified: {m}");
        }
        for s in CORE {
            let (h, t) = per_sub.get(*s).copied().unwrap_or_default();
            assert_eq!(h, t, "subsystem {s}: {h}/{t} classified");
        }
        assert!(classified * 10 >= total * 9, "{classified}/{total} < 90%");
    }

    #[test]
    fn real_forms_of_a_text_are_classified_alike() {
        let bare = "socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort";
        let logged = format!("node1:2345:2389 [3] misc/socket.cc:483 NCCL WARN {bare}");
        let wrapped = format!(
            "NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error\nLast error:\n{bare}"
        );
        for t in [bare, logged.as_str(), wrapped.as_str()] {
            let m = classify(t).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(m.entry.id, "socket-connect-failed");
            assert_eq!(m.capture("addr"), Some("10.0.0.2<45763>"));
            assert_eq!(
                m.capture("errno_text"),
                Some("Software caused connection abort")
            );
            assert_eq!(m.of_kind(CaptureKind::SocketAddress).count(), 1);
        }
    }

    #[test]
    fn root_message_wins_over_consequence_in_one_text() {
        let t =
            "h:1:2 [0] NCCL WARN socketProgress: Connection closed by remote peer 10.0.0.3<5000>\n\
                 h:1:2 [0] NCCL WARN Cuda failure 2 'out of memory'";
        let m = classify(t).expect("classified");
        assert_eq!(m.entry.id, "cuda-out-of-memory");
        let only =
            classify("socketProgress: Connection closed by remote peer 10.0.0.3<5000>").unwrap();
        assert!(only.entry.role.is_consequence());
        assert_eq!(only.capture("peer_addr"), Some("10.0.0.3<5000>"));
    }

    #[test]
    fn root_message_wins_over_an_earlier_warning_nccl_carried_on_from() {
        // Old NCCL warned about libibverbs, fell back to sockets, then failed in topology.
        let t = "h:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n\
                 h:1:2 [0] graph/xml.cc:332 NCCL WARN Could not find real path of /sys/class/pci_bus/0000:01/../../0000:01:00.0";
        let all = classify_all(t);
        assert_eq!(all[0].entry.role, Role::NonFatal);
        assert_eq!(classify(t).expect("classified").entry.id, "topo-detection");
    }

    struct FakeFacts {
        env: Vec<(&'static str, &'static str)>,
        dev_shm: Option<u64>,
        memlock_unlimited: Option<bool>,
    }
    impl Facts for FakeFacts {
        fn env(&self, name: &str) -> Option<Option<String>> {
            Some(
                self.env
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string()),
            )
        }
        fn host_number(&self, f: HostNumber) -> Option<u64> {
            match f {
                HostNumber::DevShmBytes => self.dev_shm,
                _ => None,
            }
        }
        fn host_flag(&self, f: HostFlag) -> Option<bool> {
            match f {
                HostFlag::MemlockUnlimited => self.memlock_unlimited,
                _ => None,
            }
        }
        fn local_interface(&self, _: &str) -> Option<bool> {
            None
        }
        fn nccl_version(&self) -> Option<u64> {
            Some(22703)
        }
        fn libraries(&self) -> Option<Vec<String>> {
            None
        }
        fn failed_calls(&self) -> Option<Vec<String>> {
            None
        }
    }

    #[test]
    fn causes_are_told_apart_by_recorded_facts() {
        let m = classify("Error: failed to extend /dev/shm/nccl-03v824 to 4194660 bytes, error: No space left on device (28)")
            .expect("shm");
        assert_eq!(m.entry.id, "shm-create-failed");
        assert_eq!(m.capture("errno"), Some("28"));
        let small = FakeFacts {
            env: vec![],
            dev_shm: Some(64 << 20),
            memlock_unlimited: None,
        };
        assert_eq!(m.entry.assess(&m, &small)[0].cause.id, "dev-shm-too-small");
        let big = FakeFacts {
            env: vec![],
            dev_shm: Some(32 << 30),
            memlock_unlimited: None,
        };
        let a = m.entry.assess(&m, &big);
        assert_eq!(a[0].cause.id, "dev-shm-full");
        assert!(a
            .iter()
            .any(|x| x.cause.id == "dev-shm-too-small" && x.fit == Fit::RuledOut));

        let qp =
            classify("Call to ibv_create_qp failed with error Cannot allocate memory").unwrap();
        let limited = FakeFacts {
            env: vec![],
            dev_shm: None,
            memlock_unlimited: Some(false),
        };
        assert_eq!(qp.entry.assess(&qp, &limited)[0].cause.id, "memlock-limit");
        let unlimited = FakeFacts {
            env: vec![],
            dev_shm: None,
            memlock_unlimited: Some(true),
        };
        assert_ne!(
            qp.entry.assess(&qp, &unlimited)[0].cause.id,
            "memlock-limit"
        );

        let ifn = classify("Bootstrap : no socket interface found").unwrap();
        let with_env = FakeFacts {
            env: vec![("NCCL_SOCKET_IFNAME", "eth9")],
            dev_shm: None,
            memlock_unlimited: None,
        };
        assert_eq!(
            ifn.entry.assess(&ifn, &with_env)[0].cause.id,
            "ifname-matches-nothing"
        );
    }

    #[test]
    fn cuda_error_inside_the_text_decides_over_nccls_hint() {
        // NCCL blames the Fabric Manager; the CUDA error says out of memory.
        let t = "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 2 'out of memory'. This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches. Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future.";
        let m = classify(t).unwrap();
        assert_eq!(m.entry.id, "nvls-bind-failed");
        let none = FakeFacts {
            env: vec![],
            dev_shm: None,
            memlock_unlimited: None,
        };
        assert_eq!(m.entry.assess(&m, &none)[0].cause.id, "out-of-memory");
        let t401 = t.replace(
            "CUDA error 2 'out of memory'",
            "CUDA error 401 'the operation cannot be performed in the present state'",
        );
        assert_eq!(
            classify(&t401).unwrap().entry.id,
            "cuda-illegal-state-multicast"
        );
    }

    #[test]
    fn versions_come_from_the_extracted_formats() {
        let v = versions_printing("bootstrap-rank-count-mismatch");
        assert!(v.contains("2.18.1") && v.contains("2.30.7"), "{v:?}");
        assert_eq!(version_code("2.27.3"), Some(22703));
    }

    #[test]
    fn unrelated_text_is_unclassified() {
        assert!(classify("something nobody has seen before").is_none());
        assert!(classify("").is_none());
    }
}
