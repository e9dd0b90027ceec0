//! The scenario format: one TOML file per case under `tests/scenarios/`, read by a person and by
//! the runner. A scenario names its simulated hosts (what host-facts will find there), its rank
//! groups (host, environment, the script of NCCL / CUDA-driver calls each rank plays), the
//! launcher's timeout, and the diagnosis `ncclshim report` must reach. `docs/scenarios.md` has
//! the format by example; unknown keys are refused so a typo cannot silently weaken a case.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub title: String,
    /// The failure-catalog case (`C01`), if the scenario reproduces one.
    pub catalog: Option<String>,
    /// Grouping for the table and the negative controls (config, versions, application, ...).
    pub family: String,
    /// Why the scenario does not pass yet; the runner reports it as skipped and fails once it passes.
    pub pending: Option<String>,
    /// NCCL loads ncclshim's profiler plugin (`NCCL_PROFILER_PLUGIN`): the scripted libnccl then
    /// calls its init, a Coll event and a kernel channel per collective, and its finalize, so the
    /// report also reads the plugin's dump. The real PyPI libnccl never gets that far here.
    #[serde(default)]
    pub profiler: bool,
    /// Keep the report as a reviewed snapshot (`tests/lab/snapshots/<name>.snap`, redacted).
    #[serde(default)]
    pub golden: bool,
    #[serde(default)]
    pub launcher: Launcher,
    pub hosts: Vec<Host>,
    pub ranks: Vec<RankGroup>,
    pub expect: Expect,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launcher {
    /// Like torchrun's / Slurm's job limit: ranks still running then get SIGTERM...
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// ...and SIGKILL this long after.
    #[serde(default = "default_kill_after")]
    pub kill_after_ms: u64,
    /// The user presses Ctrl-C: SIGINT to every rank still running at this time.
    pub interrupt_ms: Option<u64>,
}

fn default_timeout() -> u64 {
    4000
}
fn default_kill_after() -> u64 {
    1000
}

impl Default for Launcher {
    fn default() -> Self {
        Self {
            timeout_ms: default_timeout(),
            kill_after_ms: default_kill_after(),
            interrupt_ms: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// The hostname ranks see (UTS namespace).
    pub name: String,
    /// `/proc/sys/kernel/random/boot_id`; containers on one machine share it. Default: one per host.
    pub boot_id: Option<String>,
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    /// Size of the host's `/dev/shm` tmpfs (`64M`); default 16G.
    pub dev_shm: Option<String>,
    /// Mode of `/dev/shm`, octal; default 1777.
    pub dev_shm_mode: Option<String>,
    /// `/dev/shm` mounted read-only: no rank may create files there, root included.
    #[serde(default)]
    pub dev_shm_readonly: bool,
    /// RLIMIT_MEMLOCK of every rank here (`64K`, `unlimited`); default: the runner's own.
    pub memlock: Option<String>,
    /// `/sys` and `/proc` files host-facts reads, with their content (bind-mounted or created on
    /// a tmpfs inside the host's mount namespace).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Directories that must exist (e.g. `/sys/class/infiniband/mlx5_0`).
    #[serde(default)]
    pub dirs: Vec<String>,
    /// Libraries on the host's loader path besides libnccl: `libcuda.so.1`, `libcudart.so.12`
    /// (the lab's CUDA test doubles), `libibverbs.so.1`, `libnccl-net-ofi.so`, `libfabric.so.1`
    /// (empty stand-ins), `cu12/libnccl.so.2` / `cu11/libnccl.so.2` (a second, real PyPI
    /// libnccl in a subdirectory, for `load = "{lib}/cu12/libnccl.so.2"`).
    #[serde(default)]
    pub libraries: Vec<String>,
    /// Which libnccl.so.2 the loader finds: `script` (the lab's test double, default), `cu12` /
    /// `cu11` (the real PyPI library), `none`.
    #[serde(default = "default_nccl")]
    pub nccl: String,
}

fn default_nccl() -> String {
    "script".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interface {
    pub name: String,
    /// `10.0.0.1/24`; none leaves the interface without an address.
    pub address: Option<String>,
    /// More addresses, IPv4 or IPv6 (`2a02:6b8::600a/64`, `fe80::e866:19ff:fe1e:a688/64`), after
    /// `address`. An interface given an IPv6 link-local (`fe80::`) address here gets no
    /// kernel-made one besides it.
    #[serde(default)]
    pub addresses: Vec<String>,
    pub mtu: Option<u32>,
    /// `veth` (on the scenario's bridge, default) or `dummy` (up, reaches nothing).
    #[serde(default = "default_kind")]
    pub kind: String,
}

fn default_kind() -> String {
    "veth".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankGroup {
    pub host: String,
    /// How many ranks this group stands for (numbered in file order within its run).
    #[serde(default = "one")]
    pub count: u32,
    /// Which run of the job (several runs share one dump directory, run after run).
    #[serde(default = "one")]
    pub run: u32,
    /// Environment; `{rank}`, `{local_rank}`, `{world_size}` are replaced per rank.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// What the scripted libnccl's ncclGetVersion answers.
    pub nccl_version: Option<u32>,
    /// The CUDA test doubles' identity for these ranks.
    pub cuda: Option<Cuda>,
    pub script: Vec<Step>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cuda {
    pub driver: Option<u32>,
    pub runtime: Option<u32>,
    /// The current device ordinal (`cuCtxGetDevice`): a number, or `"{local_rank}"` (each
    /// rank on the device of its local rank, as `torch.cuda.set_device(LOCAL_RANK)` does).
    pub device: Option<Device>,
    /// The PCI bus number of that device; default `0x65 + ordinal`.
    pub pci_bus: Option<u32>,
    pub name: Option<String>,
    /// What `cuDeviceGetUuid_v2` answers (`MIG-3b0c1f2e-aaaa-5d6e-9f00-111111111111` for a MIG
    /// instance, `GPU-...`); default one derived from the PCI bus, as `cuDeviceGetUuid` answers.
    pub uuid: Option<String>,
}

/// A device ordinal, or a text with `{local_rank}` / `{rank}` filled in per rank.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Device {
    Ordinal(u32),
    PerRank(String),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Ordinal(n) => write!(f, "{n}"),
            Device::PerRank(t) => f.write_str(t),
        }
    }
}

/// A CUDA driver call NCCL makes inside a step (before the step's own `driver`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverCall {
    /// `cuMemCreate`, `cuMemImportFromShareableHandle`, ...
    pub call: String,
    /// The CUresult (of the last of `repeat` calls; the others succeed).
    #[serde(default)]
    pub rc: i32,
    #[serde(default = "one_u64")]
    pub repeat: u64,
    /// `cuMemCreate`: where the allocation is (`device:0`, `host`, `host_numa:2`); default an
    /// all-zero CUmemAllocationProp.
    pub location: Option<String>,
}

impl DriverCall {
    /// CUmemLocationType and id of `location`.
    pub fn location(&self) -> Result<Option<(u32, i32)>, String> {
        let Some(l) = &self.location else {
            return Ok(None);
        };
        let (kind, id) = l.split_once(':').unwrap_or((l, "0"));
        let t = match kind {
            "device" => 1,
            "host" => 2,
            "host_numa" => 3,
            "host_numa_current" => 4,
            _ => {
                return Err(format!(
                    "location {l:?}: device, host, host_numa or host_numa_current"
                ))
            }
        };
        let id = id
            .parse()
            .map_err(|_| format!("location {l:?}: the id is a number"))?;
        Ok(Some((t, id)))
    }
}

fn one_u64() -> u64 {
    1
}

/// One step of a rank's script. Exactly one of `call`, `sleep_ms`, `hang_outside`, `signal`,
/// `exit`, `load`, `app_driver` says what the step is.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// An NCCL function (`ncclCommInitRank`, `ncclAllReduce`, `ncclCommGetAsyncError`, ...).
    pub call: Option<String>,
    /// Calls this step stands for; the scripted result applies to the last one.
    pub repeat: Option<u64>,
    /// The ncclResult_t of the (last) call.
    pub rc: Option<i32>,
    /// NCCL's last-error text after a failure.
    pub error: Option<String>,
    /// The (last) call never returns.
    pub hang: Option<bool>,
    /// A collective: the (last) call returns, but its kernel never ends on the GPU (seen only
    /// through the profiler plugin: its kernel channel never stops), nor do later ones'.
    pub kernel_hang: Option<bool>,
    /// A collective: each call's kernel spends this many microseconds on the GPU, as the
    /// profiler plugin is told (a rank waiting for a late peer spends longer than the late rank).
    pub kernel_us: Option<u64>,
    /// Delay after each call (polls, slow steps).
    pub every_ms: Option<u64>,
    /// The (last) call takes this long before it returns (a connect that retries until it gives
    /// up, a slow init).
    pub takes_ms: Option<u64>,
    /// `ncclCommGetAsyncError`: the async error the last poll reports.
    pub async_error: Option<i32>,
    pub count: Option<u64>,
    /// A collective's or point-to-point call's datatype: `bfloat16`, `float16`, `float32`
    /// (default), `int8`, ... (NCCL's names, with or without `nccl`), or ncclDataType_t's number.
    pub datatype: Option<String>,
    pub peer: Option<i32>,
    /// `ncclCommSplit`: the color (default 0). Its `nranks`, when given, is the size of the new
    /// communicator (ranks of a color are consecutive); default the parent's.
    pub color: Option<i32>,
    /// `ncclCommInitRank`: defaults are the job's size, this rank, uniqueId seed 1.
    pub nranks: Option<u32>,
    pub rank: Option<u32>,
    pub uid: Option<u64>,
    /// `ncclGetUniqueId` / `ncclCommInitRank`: the bootstrap root the uniqueId names,
    /// `"a.b.c.d:port"` (default 10.0.0.1).
    pub root: Option<String>,
    /// A CUDA driver call NCCL makes inside this step, and its CUresult.
    pub driver: Option<String>,
    /// The CUresult of `driver` or `app_driver`.
    pub driver_rc: Option<i32>,
    /// Several driver calls NCCL makes inside this step, in order, before `driver`:
    /// `[{ call = "cuMemCreate", rc = 1 }, { call = "cuMemImportFromShareableHandle", repeat = 7 }]`.
    #[serde(default)]
    pub drivers: Vec<DriverCall>,
    /// The application's own CUDA driver call (`cuIpcOpenMemHandle`), outside any NCCL call.
    pub app_driver: Option<String>,
    pub sleep_ms: Option<u64>,
    pub hang_outside: Option<bool>,
    /// `SIGSEGV`, `SIGABRT`, `SIGKILL`, ...: the rank raises it.
    pub signal: Option<String>,
    pub exit: Option<i32>,
    /// dlopen a library (as a framework loads libcudart); `{lib}` is the host's loader directory.
    pub load: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The primary finding's id, or `none` for a job the report must find nothing wrong with,
    /// or `any` (the default; only with `case`): the case's expectation alone judges the primary.
    #[serde(default = "any")]
    pub primary: String,
    /// A case of a case collection (`HO-05`): the judge also applies that case's expectation
    /// (`tests/scenarios/*-expectations.json`, read as `tests/lab/cases.rs` says).
    pub case: Option<String>,
    /// The primary finding's ranks, exactly.
    pub ranks: Option<Vec<u32>>,
    /// Texts the primary finding must contain (title, evidence, remedy; case-insensitive).
    #[serde(default)]
    pub facts: Vec<String>,
    /// Finding ids that must not appear anywhere in the report.
    #[serde(default)]
    pub absent: Vec<String>,
    /// Finding ids that must appear besides the primary (consequences, other ranks' stories).
    #[serde(default)]
    pub also: Vec<String>,
    /// With `primary = "none"`: the one advisory finding a healthy job may have (never primary);
    /// `ranks` and `facts` then apply to it.
    pub advisory: Option<String>,
}

fn any() -> String {
    "any".into()
}

/// ncclDataType_t of a datatype name (`bfloat16`, `ncclBfloat16`, `bf16`) or number.
pub fn datatype_number(name: &str) -> Result<i32, String> {
    let n = name.trim_start_matches("nccl").to_ascii_lowercase();
    Ok(match n.as_str() {
        "int8" | "char" => 0,
        "uint8" => 1,
        "int32" | "int" => 2,
        "uint32" => 3,
        "int64" => 4,
        "uint64" => 5,
        "float16" | "half" | "fp16" => 6,
        "float32" | "float" | "fp32" => 7,
        "float64" | "double" | "fp64" => 8,
        "bfloat16" | "bf16" => 9,
        _ => n
            .parse()
            .map_err(|_| format!("unknown datatype {name:?}"))?,
    })
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let s: Scenario = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        s.validate()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), String> {
        for g in &self.ranks {
            if !self.hosts.iter().any(|h| h.name == g.host) {
                return Err(format!("rank group on unknown host {:?}", g.host));
            }
            for s in &g.script {
                let kinds = [
                    s.call.is_some(),
                    s.sleep_ms.is_some(),
                    s.hang_outside.is_some(),
                    s.signal.is_some(),
                    s.exit.is_some(),
                    s.load.is_some(),
                    s.app_driver.is_some(),
                ];
                if kinds.iter().filter(|k| **k).count() != 1 {
                    return Err(format!("a step must be exactly one of call/sleep_ms/hang_outside/signal/exit/load/app_driver: {s:?}"));
                }
                if let Some(sig) = &s.signal {
                    signal_number(sig)?;
                }
                if let Some(d) = &s.datatype {
                    datatype_number(d)?;
                }
                if let Some(Device::PerRank(t)) = g.cuda.as_ref().and_then(|c| c.device.as_ref()) {
                    if t != "{local_rank}" && t != "{rank}" {
                        return Err(format!(
                            "cuda.device: a number, \"{{local_rank}}\" or \"{{rank}}\", not {t:?}"
                        ));
                    }
                }
                for d in &s.drivers {
                    d.location()?;
                }
                if !s.drivers.is_empty() && s.call.is_none() {
                    return Err(format!("`drivers` belong to an NCCL call step: {s:?}"));
                }
            }
        }
        if self.expect.primary == "any" && self.expect.case.is_none() {
            return Err("[expect] needs a `primary` finding id (or `none`), or a `case`".into());
        }
        for h in &self.hosts {
            if !["script", "cu12", "cu11", "none"].contains(&h.nccl.as_str()) {
                return Err(format!(
                    "host {}: nccl must be script, cu12, cu11 or none",
                    h.name
                ));
            }
            for i in &h.interfaces {
                if i.name.len() > 15 || !["veth", "dummy"].contains(&i.kind.as_str()) {
                    return Err(format!(
                        "host {}: interface {:?} (names up to 15 chars; kind veth or dummy)",
                        h.name, i.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The runs of the job, in order.
    pub fn runs(&self) -> Vec<u32> {
        let mut r: Vec<u32> = self.ranks.iter().map(|g| g.run).collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// Every rank of the job as the runner numbers it: run, rank, local rank (per host), world
    /// size of its run, and its group.
    pub fn places(&self) -> Vec<(u32, crate::script::RankPlace, &RankGroup)> {
        let mut out = Vec::new();
        for run in self.runs() {
            let groups: Vec<&RankGroup> = self.ranks.iter().filter(|g| g.run == run).collect();
            let world: u32 = groups.iter().map(|g| g.count).sum();
            let mut local: BTreeMap<&str, u32> = BTreeMap::new();
            let mut rank = 0;
            for g in groups {
                for _ in 0..g.count {
                    let lr = local.entry(g.host.as_str()).or_insert(0);
                    let place = crate::script::RankPlace {
                        rank,
                        local_rank: *lr,
                        world_size: world,
                    };
                    *lr += 1;
                    out.push((run, place, g));
                    rank += 1;
                }
            }
        }
        out
    }

    /// NCCL's error texts the scripts play (`error` of every step, placeholders filled in per
    /// rank), longest first: what a case's judge removes from a finding's own words.
    pub fn error_texts(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, place, g) in self.places() {
            for s in &g.script {
                if let Some(e) = &s.error {
                    let e = place.fill(e);
                    if !out.contains(&e) {
                        out.push(e);
                    }
                }
            }
        }
        out.sort_by_key(|t| std::cmp::Reverse(t.len()));
        out
    }

    /// Whether any host loads the real PyPI libnccl.
    pub fn real_nccl(&self) -> Option<&str> {
        self.hosts
            .iter()
            .map(|h| h.nccl.as_str())
            .find(|n| n.starts_with("cu"))
    }
}

/// `SIGSEGV` / `SEGV` / `11` to its number.
pub fn signal_number(name: &str) -> Result<i32, String> {
    let n = name.trim_start_matches("SIG");
    Ok(match n {
        "SEGV" => libc::SIGSEGV,
        "ABRT" => libc::SIGABRT,
        "BUS" => libc::SIGBUS,
        "FPE" => libc::SIGFPE,
        "ILL" => libc::SIGILL,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        _ => n.parse().map_err(|_| format!("unknown signal {name:?}"))?,
    })
}

/// `64M`, `16G`, `512K`, `1024` to bytes.
pub fn bytes(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .map(|n| n * mul)
        .map_err(|_| format!("not a size: {s:?}"))
}
