//! NCCL's known bugs and behaviour changes by version, and the defaults of its environment
//! variables per version (`knowledge/nccl-versions.toml`).
//!
//! The report asks "which entries apply to the NCCL version this process ran", then matches their
//! symptoms against what was recorded (rules/install/known_bug.rs); single-purpose rules ask for one
//! version fact by id (the release that changed a return code, reworded a message or fixed a bug),
//! so no rule carries a version literal; `doctor` lists the bugs an installed NCCL still has.

use serde::Deserialize;
use std::cmp::Ordering;
use std::fmt;
use std::sync::OnceLock;

/// An NCCL release, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    /// `"2.23.4"` (a `-1` package suffix or `v` prefix is accepted); None when malformed.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().trim_start_matches('v');
        let s = s.split(['-', '+']).next()?;
        let mut it = s.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let patch = it.next().map_or(Some(0), |p| p.parse().ok())?;
        if it.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
        })
    }

    /// From `ncclGetVersion`'s code: 21903 → 2.19.3 (codes before 2.9 used `major*1000`).
    pub fn from_code(code: u64) -> Option<Self> {
        let (major, minor, patch) = if code >= 20900 {
            (code / 10000, (code % 10000) / 100, code % 100)
        } else if code >= 1000 {
            (code / 1000, (code % 1000) / 100, code % 100)
        } else {
            return None;
        };
        Some(Self {
            major: u32::try_from(major).ok()?,
            minor: minor as u32,
            patch: patch as u32,
        })
    }

    /// `ncclGetVersion`'s code for this version (the ≥ 2.9 encoding).
    pub fn code(&self) -> u64 {
        u64::from(self.major) * 10000 + u64::from(self.minor) * 100 + u64::from(self.patch)
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Bug,
    BehaviourChange,
    DefaultChange,
    Removal,
}

/// What goes wrong when the entry applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Impact {
    Corruption,
    Crash,
    Hang,
    Error,
    Leak,
    Performance,
    Info,
}

/// Facts about a process (and its job) a known bug can depend on; derived from the recording by
/// the rule that matches entries (`rules/install/known_bug.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// cuMem (VMM) buffers: cuMem driver calls recorded, or on by default and not disabled.
    Cumem,
    /// cuMem host memory for the SHM transport.
    CumemHost,
    /// NVLink SHARP: multicast driver calls, NCCL_NVLS_ENABLE=1 or NVLS in an error text.
    Nvls,
    /// Multi-node NVLink.
    Mnnvl,
    /// The InfiniBand / RoCE transport.
    Ib,
    Collnet,
    /// ncclCommSplit / ncclCommShrink were called.
    Split,
    /// A non-blocking communicator (ncclInProgress seen).
    Nonblocking,
    /// ncclSend / ncclRecv were called.
    P2pOps,
    /// Buffer registration (ncclCommRegister / ncclCommWindowRegister).
    Registration,
    ProfilerPlugin,
    NetPlugin,
    /// The process ran in a container.
    Container,
    /// The job spans several machines.
    MultiNode,
    /// At least `thresholds.large_scale.min_ranks` ranks.
    LargeScale,
    /// NCCL is linked statically into the program.
    NcclStatic,
    /// The job's GPUs are not all of one model.
    HeterogeneousGpus,
    /// The CUDA driver is older than the runtime NCCL uses.
    DriverOlderThanRuntime,
    /// nvidia_peermem is loaded but only /sys/module/nvidia_peermem exists (Linux ≥ 6.6).
    PeermemModuleOnly,
    /// A communicator of the process was destroyed or aborted before its failure.
    DestroyedComm,
    /// The job's hosts run different numbers of ranks (7 + 8).
    UnevenRanksPerHost,
}

/// What the recorded failures must show (any one of the kinds).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Symptoms {
    /// Case-insensitive fragments of NCCL's error text; any one matches.
    #[serde(default)]
    pub text: Vec<String>,
    /// Groups of fragments that must all appear in one error text; any group matches.
    #[serde(default)]
    pub all_of: Vec<Vec<String>>,
    /// CUresult of a failed driver call or inside NCCL's `Cuda failure N` text.
    #[serde(default)]
    pub cu_results: Vec<i32>,
    /// Return codes (ncclResult_t) of failing NCCL calls.
    #[serde(default)]
    pub nccl_results: Vec<i32>,
    /// Fatal signal numbers.
    #[serde(default)]
    pub signals: Vec<u64>,
    /// A call still in flight at the end of the recording.
    #[serde(default)]
    pub hang: bool,
    /// The failing (or hanging) call must be one of these.
    #[serde(default)]
    pub calls: Vec<String>,
}

impl Symptoms {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
            && self.all_of.is_empty()
            && self.cu_results.is_empty()
            && self.nccl_results.is_empty()
            && self.signals.is_empty()
            && !self.hang
    }

    /// Whether an error text shows one of the text symptoms.
    pub fn text_matches(&self, text: &str) -> bool {
        let t = text.to_ascii_lowercase();
        self.text
            .iter()
            .any(|n| t.contains(&n.to_ascii_lowercase()))
            || self
                .all_of
                .iter()
                .any(|g| !g.is_empty() && g.iter().all(|n| t.contains(&n.to_ascii_lowercase())))
    }

    /// Whether a call name is admitted by `calls` (every call when the list is empty).
    pub fn call_admitted(&self, name: &str) -> bool {
        self.calls.is_empty() || self.calls.iter().any(|c| c == name)
    }
}

/// Conditions on the process that must all hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conditions {
    /// `NAME` (set), `NAME=VALUE`, `NAME!=VALUE` (unset or different), `NAME*=PART` (contains).
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub features: Vec<Feature>,
    /// Fragments of the GPU's name (any one).
    #[serde(default)]
    pub gpu_names: Vec<String>,
}

/// One env condition, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvCondition<'a> {
    Set(&'a str),
    Equals(&'a str, &'a str),
    NotEquals(&'a str, &'a str),
    Contains(&'a str, &'a str),
}

impl<'a> EnvCondition<'a> {
    pub fn parse(s: &'a str) -> Option<Self> {
        let valid =
            |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let (name, cond) = if let Some((n, v)) = s.split_once("!=") {
            (n, EnvCondition::NotEquals(n, v))
        } else if let Some((n, v)) = s.split_once("*=") {
            (n, EnvCondition::Contains(n, v))
        } else if let Some((n, v)) = s.split_once('=') {
            (n, EnvCondition::Equals(n, v))
        } else {
            (s, EnvCondition::Set(s))
        };
        valid(name).then_some(cond)
    }

    /// Whether the environment value (`None`: unset) satisfies the condition.
    pub fn holds(&self, value: Option<&str>) -> bool {
        match *self {
            EnvCondition::Set(_) => value.is_some(),
            EnvCondition::Equals(_, v) => value.is_some_and(|x| x.trim().eq_ignore_ascii_case(v)),
            EnvCondition::NotEquals(_, v) => {
                value.is_none_or(|x| !x.trim().eq_ignore_ascii_case(v))
            }
            EnvCondition::Contains(_, v) => value.is_some_and(|x| x.contains(v)),
        }
    }

    pub fn name(&self) -> &'a str {
        match *self {
            EnvCondition::Set(n)
            | EnvCondition::Equals(n, _)
            | EnvCondition::NotEquals(n, _)
            | EnvCondition::Contains(n, _) => n,
        }
    }
}

/// One known bug or behaviour change.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub id: String,
    pub title: String,
    pub kind: Kind,
    pub introduced: Option<String>,
    pub fixed_in: Option<String>,
    pub impact: Impact,
    /// A version fact for other rules; never a finding of its own.
    #[serde(default)]
    pub informational: bool,
    /// The text symptoms identify this entry rather than merely fit it.
    #[serde(default)]
    pub specific: bool,
    #[serde(default)]
    pub symptoms: Symptoms,
    #[serde(default)]
    pub when: Conditions,
    pub remedy: String,
    #[serde(default)]
    pub workaround: Vec<String>,
    pub source: String,
}

impl Change {
    pub fn introduced(&self) -> Option<NcclVersion> {
        self.introduced.as_deref().and_then(NcclVersion::parse)
    }

    pub fn fixed_in(&self) -> Option<NcclVersion> {
        self.fixed_in.as_deref().and_then(NcclVersion::parse)
    }

    /// Whether the entry describes version `v`: introduced ≤ v < fixed_in (an unknown bound is open).
    pub fn applies_to(&self, v: NcclVersion) -> bool {
        self.introduced().is_none_or(|i| i <= v) && self.fixed_in().is_none_or(|f| v < f)
    }
}

/// An NCCL variable's default from a version on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultSince {
    pub since: String,
    pub default: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvDefault {
    pub var: String,
    pub values: Vec<DefaultSince>,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionsFile {
    pub change: Vec<Change>,
    pub env_default: Vec<EnvDefault>,
}

pub const FILE: &str = "nccl-versions.toml";
const TEXT: &str = include_str!("../../knowledge/nccl-versions.toml");

pub fn file() -> &'static VersionsFile {
    static F: OnceLock<VersionsFile> = OnceLock::new();
    F.get_or_init(|| super::parse(FILE, TEXT))
}

/// Every known bug and behaviour change.
pub fn changes() -> &'static [Change] {
    &file().change
}

/// One entry by id. Rules name the entries they depend on; a missing id is a build defect the
/// tests catch (`every_id_a_rule_names_exists`).
pub fn change(id: &str) -> &'static Change {
    changes()
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("knowledge/{FILE} has no entry `{id}`"))
}

/// The version in which entry `id` was introduced, as an `ncclGetVersion` code (for rules that
/// compare a recorded code). Panics when the entry has no `introduced`: a build defect.
pub fn introduced_code(id: &str) -> u64 {
    change(id)
        .introduced()
        .unwrap_or_else(|| panic!("knowledge/{FILE}: `{id}` has no `introduced`"))
        .code()
}

/// The version that fixed entry `id`, as an `ncclGetVersion` code.
pub fn fixed_in_code(id: &str) -> u64 {
    change(id)
        .fixed_in()
        .unwrap_or_else(|| panic!("knowledge/{FILE}: `{id}` has no `fixed_in`"))
        .code()
}

/// The entries that describe version `v`.
pub fn applying_to(v: NcclVersion) -> impl Iterator<Item = &'static Change> {
    changes().iter().filter(move |c| c.applies_to(v))
}

/// The default of an NCCL variable in version `v`, with its source; None when the variable is not
/// in the table or did not exist yet.
pub fn default_for(var: &str, v: NcclVersion) -> Option<(&'static str, &'static str)> {
    let d = file().env_default.iter().find(|d| d.var == var)?;
    d.values
        .iter()
        .filter(|x| NcclVersion::parse(&x.since).is_some_and(|s| s <= v))
        .max_by(|a, b| {
            NcclVersion::parse(&a.since)
                .cmp(&NcclVersion::parse(&b.since))
                .then(Ordering::Equal)
        })
        .map(|x| (x.default.as_str(), d.source.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn v(s: &str) -> NcclVersion {
        NcclVersion::parse(s).unwrap()
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(v("2.23.4"), v("v2.23.4-1"));
        assert!(v("2.9.9") < v("2.10.3"));
        assert_eq!(NcclVersion::from_code(21903), Some(v("2.19.3")));
        assert_eq!(NcclVersion::from_code(2708), Some(v("2.7.8")));
        assert_eq!(NcclVersion::from_code(5), None);
        assert_eq!(v("2.30.7").code(), 23007);
        assert_eq!(v("2.30.7").to_string(), "2.30.7");
        assert!(NcclVersion::parse("2.x.1").is_none());
        assert!(NcclVersion::parse("2.1.1.1").is_none());
    }

    #[test]
    fn the_file_validates() {
        let all = changes();
        assert!(all.len() >= 60, "only {} entries", all.len());
        let mut ids = HashSet::new();
        for c in all {
            assert!(ids.insert(c.id.as_str()), "duplicate id {}", c.id);
            assert!(
                !c.title.trim().is_empty() && !c.remedy.trim().is_empty(),
                "{}",
                c.id
            );
            assert!(
                c.source.contains("NVIDIA/nccl")
                    || c.source.contains("env.rst")
                    || c.source.contains("issue"),
                "{}: source must name a release, the user guide or an issue",
                c.id
            );
            for (what, s) in [("introduced", &c.introduced), ("fixed_in", &c.fixed_in)] {
                if let Some(s) = s {
                    assert!(NcclVersion::parse(s).is_some(), "{}: {what} {s:?}", c.id);
                }
            }
            if let (Some(i), Some(f)) = (c.introduced(), c.fixed_in()) {
                assert!(i < f, "{}: introduced {i} is not before fixed_in {f}", c.id);
            }
            for e in &c.when.env {
                assert!(
                    EnvCondition::parse(e).is_some(),
                    "{}: env condition {e:?}",
                    c.id
                );
            }
            assert!(
                c.symptoms.all_of.iter().all(|g| g.len() >= 2),
                "{}: an all_of group needs two fragments or more",
                c.id
            );
            // A reported entry must be matchable by something recorded.
            assert!(
                c.informational
                    || !c.symptoms.is_empty()
                    || !c.when.features.is_empty()
                    || !c.when.env.is_empty()
                    || !c.when.gpu_names.is_empty(),
                "{}: no symptom and no condition",
                c.id
            );
            if c.kind == Kind::Bug && c.fixed_in.is_some() {
                assert!(
                    c.remedy.contains(c.fixed_in.as_deref().unwrap()) || !c.workaround.is_empty(),
                    "{}: a fixed bug's remedy names the fixed-in version or a workaround",
                    c.id
                );
            }
        }
        let mut vars = HashSet::new();
        for d in &file().env_default {
            assert!(vars.insert(d.var.as_str()), "duplicate default {}", d.var);
            assert!(!d.values.is_empty() && !d.source.is_empty(), "{}", d.var);
            let sinces: Vec<NcclVersion> = d
                .values
                .iter()
                .map(|x| {
                    NcclVersion::parse(&x.since)
                        .unwrap_or_else(|| panic!("{}: {:?}", d.var, x.since))
                })
                .collect();
            assert!(
                sinces.windows(2).all(|w| w[0] < w[1]),
                "{}: not ascending",
                d.var
            );
        }
    }

    #[test]
    fn ranges_are_half_open() {
        let c = change("peermem-kernel-6.6");
        assert!(c.applies_to(v("2.21.5")));
        assert!(!c.applies_to(v("2.23.4")));
        let c = change("nvls-silent-fallback");
        assert!(!c.applies_to(v("2.26.6")));
        assert!(c.applies_to(v("2.28.9")));
        assert!(!c.applies_to(v("2.29.2")));
        assert!(applying_to(v("2.18.1")).any(|c| c.id == "slow-init-2.18.1"));
        assert!(!applying_to(v("2.18.3")).any(|c| c.id == "slow-init-2.18.1"));
    }

    #[test]
    fn defaults_follow_the_version() {
        assert_eq!(
            default_for("NCCL_IB_TIMEOUT", v("2.12.12")).unwrap().0,
            "14"
        );
        assert_eq!(default_for("NCCL_IB_TIMEOUT", v("2.21.5")).unwrap().0, "18");
        assert_eq!(default_for("NCCL_IB_TIMEOUT", v("2.32.3")).unwrap().0, "20");
        assert_eq!(
            default_for("NCCL_CUMEM_ENABLE", v("2.18.6")).unwrap().0,
            "0"
        );
        assert!(default_for("NCCL_CUMEM_ENABLE", v("2.17.1")).is_none());
        assert!(default_for("NCCL_NOT_A_VAR", v("2.30.7")).is_none());
    }

    #[test]
    fn env_conditions() {
        let c = EnvCondition::parse("NCCL_IB_TIMEOUT!=").unwrap();
        assert!(c.holds(None));
        assert!(c.holds(Some("22")));
        assert!(!c.holds(Some("")));
        let c = EnvCondition::parse("NCCL_NET_PLUGIN*=/").unwrap();
        assert!(c.holds(Some("/opt/lib/libnccl-net.so")));
        assert!(!c.holds(Some("aws-ofi")));
        assert!(EnvCondition::parse("NCCL_P2P_DISABLE=1")
            .unwrap()
            .holds(Some("1")));
        assert!(EnvCondition::parse("bad name").is_none());
    }
}
