//! `ncclshim doctor`: checks this host before a job, with the same host-fact code the shim
//! records inside every rank (`ncclshim-host-facts`). Each check looks for the precondition of a
//! catalog failure (libibverbs for `NCCL_NET=IB`, peermem for GPUDirect RDMA, `/dev/shm`, the
//! locked-memory limit, `NCCL_SOCKET_IFNAME`, the installed NCCL versions, suspicious `NCCL_*`
//! settings) and says what it saw and what to change.
//!
//! The checks are a pure function of the collected facts, so they are tested on made-up hosts.

use crate::names::nccl_version_string;
use crate::rules::c08_socket_ifname::filter_matches;
use ncclshim_host_facts::host::HostFacts;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// First NCCL that finds `nvidia_peermem` where current kernels put it (catalog C05).
const PEERMEM_FIXED_IN: i64 = 22304;
/// NCCL needs far more than Docker's default 64 MiB of `/dev/shm` (catalog C07).
const MIN_DEV_SHM: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub id: &'static str,
    pub status: Status,
    pub title: String,
    pub evidence: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<&'static str>,
}

impl Check {
    fn new(id: &'static str, status: Status, title: impl Into<String>) -> Self {
        Self {
            id,
            status,
            title: title.into(),
            evidence: Vec::new(),
            remedy: None,
            catalog: None,
        }
    }

    fn evidence(mut self, e: impl Into<String>) -> Self {
        self.evidence.push(e.into());
        self
    }

    fn remedy(mut self, r: impl Into<String>) -> Self {
        self.remedy = Some(r.into());
        self
    }

    fn catalog(mut self, c: &'static str) -> Self {
        self.catalog = Some(c);
        self
    }
}

/// An NCCL library found on this host.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InstalledNccl {
    pub path: String,
    pub version: Option<i64>,
}

/// Everything the checks look at.
#[derive(Debug, Clone, Serialize)]
pub struct Facts {
    pub env: BTreeMap<String, String>,
    pub host: HostFacts,
    pub nccl: Vec<InstalledNccl>,
    pub nvidia_driver: Option<String>,
}

fn env_is_true(env: &BTreeMap<String, String>, k: &str) -> bool {
    env.get(k).is_some_and(|v| v.trim() == "1")
}

fn has_ib(h: &HostFacts) -> bool {
    !h.infiniband.is_empty() || h.dev_infiniband
}

fn peermem(h: &HostFacts, suffix: &str) -> Option<bool> {
    h.peermem
        .iter()
        .find(|p| p.path.ends_with(suffix))
        .map(|p| p.exists)
}

/// Runs every check on collected facts.
pub fn run_checks(f: &Facts) -> Vec<Check> {
    let (env, h) = (&f.env, &f.host);
    let mut out = Vec::new();

    // Installed NCCL libraries and their versions (C23 / C03 start here).
    let versions: BTreeSet<i64> = f.nccl.iter().filter_map(|n| n.version).collect();
    let mut c = match (f.nccl.is_empty(), versions.len()) {
        (true, _) => Check::new("nccl-installed", Status::Warn, "no libnccl found on this host")
            .remedy("Install NCCL (pip install nvidia-nccl-cu12) or make the framework's copy findable; \
                     a framework that links NCCL statically cannot be observed with LD_PRELOAD.")
            .catalog("C35"),
        (false, n) if n > 1 => Check::new(
            "nccl-installed",
            Status::Warn,
            "several NCCL versions are installed: the first one loaded wins in each process",
        )
        .remedy("Keep one NCCL per environment, or make sure every node and every library loads the same \
                 one (LD_LIBRARY_PATH, import order).")
        .catalog("C23"),
        _ => Check::new("nccl-installed", Status::Ok, "NCCL is installed"),
    };
    for n in &f.nccl {
        let v = n
            .version
            .map(|v| nccl_version_string(v as u64))
            .unwrap_or_else(|| "version unknown".into());
        c = c.evidence(format!("{} ({v})", n.path));
    }
    out.push(c);

    // NCCL_NET=IB without a usable IB stack (C01).
    if let Some(net) = env.get("NCCL_NET") {
        let wants_ib = net.trim().eq_ignore_ascii_case("ib");
        if wants_ib && (!h.libibverbs_dlopen || !has_ib(h)) {
            let mut c = Check::new(
                "net-ib-unavailable",
                Status::Error,
                "NCCL_NET=IB is set but this host cannot run NCCL's IB transport: communicator init will fail with ncclInvalidUsage",
            )
            .evidence(format!("NCCL_NET={net}"))
            .evidence(format!(
                "libibverbs.so.1 {}",
                if h.libibverbs_dlopen { "found" } else { "not found on the loader path" }
            ))
            .evidence(format!(
                "InfiniBand devices: {}",
                if h.infiniband.is_empty() { "none in /sys/class/infiniband".to_string() } else { h.infiniband.join(", ") }
            ))
            .remedy("Unset NCCL_NET (NCCL then picks IB or sockets itself) or set NCCL_NET=Socket; for IB, \
                     install rdma-core/libibverbs1 and pass /dev/infiniband into the container.")
            .catalog("C01");
            if let Some(p) = &h.libibverbs_path {
                c = c.evidence(format!("libibverbs path: {p}"));
            }
            out.push(c);
        }
    }
    if has_ib(h) && !h.libibverbs_dlopen {
        out.push(
            Check::new(
                "ibverbs-missing",
                Status::Warn,
                "InfiniBand devices exist but libibverbs.so.1 cannot be found: NCCL silently falls back to TCP sockets",
            )
            .evidence(format!("InfiniBand devices: {}", h.infiniband.join(", ")))
            .remedy("Install rdma-core / libibverbs1 (inside the container image too).")
            .catalog("C01"),
        );
    }

    // GPUDirect RDMA detection (C05).
    if has_ib(h) {
        let module = peermem(h, "/sys/module/nvidia_peermem/version") == Some(true);
        let legacy = peermem(h, "memory_peers/nv_mem/version") == Some(true)
            || peermem(h, "memory_peers/nv_mem_nc/version") == Some(true);
        let old: Vec<&InstalledNccl> = f
            .nccl
            .iter()
            .filter(|n| n.version.is_some_and(|v| v < PEERMEM_FIXED_IN))
            .collect();
        if module && !legacy && !old.is_empty() {
            let mut c = Check::new(
                "gdr-peermem-undetected",
                Status::Warn,
                "nvidia_peermem is loaded, but NCCL older than 2.23.4 looks only under /sys/kernel/mm/memory_peers and will run without GPUDirect RDMA",
            )
            .evidence("/sys/module/nvidia_peermem/version exists; /sys/kernel/mm/memory_peers/nv_mem/version does not")
            .remedy("Upgrade NCCL to 2.23.4 or newer, or use DMA-BUF (NCCL_DMABUF_ENABLE=1).")
            .catalog("C05");
            for n in old {
                c = c.evidence(format!(
                    "{} is NCCL {}",
                    n.path,
                    nccl_version_string(n.version.unwrap_or(0) as u64)
                ));
            }
            out.push(c);
        } else if !module && !legacy {
            out.push(
                Check::new(
                    "gdr-no-peermem",
                    Status::Info,
                    "InfiniBand is present but nvidia_peermem is not loaded: GPUDirect RDMA only through DMA-BUF",
                )
                .remedy("modprobe nvidia_peermem, or rely on DMA-BUF (kernel >= 5.12, recent driver).")
                .catalog("C05"),
            );
        }
        // Locked memory for QP creation (C11).
        if !h.memlock_unlimited {
            if let Some(soft) = h.memlock_soft_bytes {
                out.push(
                    Check::new(
                        "memlock-limit",
                        Status::Warn,
                        "the locked-memory limit is finite: ibv_create_qp / memory registration can fail under load",
                    )
                    .evidence(format!("RLIMIT_MEMLOCK soft limit: {soft} bytes"))
                    .remedy("Run with `ulimit -l unlimited` (docker: --ulimit memlock=-1:-1; systemd: LimitMEMLOCK=infinity).")
                    .catalog("C11"),
                );
            }
        }
    }

    // /dev/shm (C07).
    match h.dev_shm_bytes {
        Some(b) if b < MIN_DEV_SHM => out.push(
            Check::new(
                "dev-shm-small",
                Status::Warn,
                "/dev/shm is small: NCCL's shared-memory transport fails to create or extend its segments",
            )
            .evidence(format!("/dev/shm size: {} MiB", b >> 20))
            .remedy("Give the container more shared memory (docker --shm-size=16g or --ipc=host; Kubernetes: an emptyDir with medium Memory at /dev/shm).")
            .catalog("C07"),
        ),
        None => out.push(Check::new("dev-shm-small", Status::Warn, "/dev/shm is missing").catalog("C07")),
        _ => {}
    }

    // NCCL_SOCKET_IFNAME (C08).
    if let Some(v) = env.get("NCCL_SOCKET_IFNAME") {
        let ifs: Vec<crate::model::facts::NetIf> = h
            .netifs
            .iter()
            .map(|i| crate::model::facts::NetIf {
                name: i.name.clone(),
                up: i.up,
                loopback: i.loopback,
                addrs: i.addrs.clone(),
            })
            .collect();
        if !filter_matches(v, &ifs) {
            let names: Vec<&str> = h
                .netifs
                .iter()
                .filter(|i| i.up)
                .map(|i| i.name.as_str())
                .collect();
            out.push(
                Check::new(
                    "socket-ifname-no-match",
                    Status::Error,
                    "NCCL_SOCKET_IFNAME selects no interface that is up: bootstrap will fail with \"no socket interface found\"",
                )
                .evidence(format!("NCCL_SOCKET_IFNAME={v}"))
                .evidence(format!("interfaces up: {}", names.join(", ")))
                .remedy("Set NCCL_SOCKET_IFNAME to a prefix of an interface above (e.g. eth or ens), `=name` for an exact name, or unset it.")
                .catalog("C08"),
            );
        }
    }

    // Settings that are legal but often the cause of a slow or failing job.
    for (k, why) in [
        (
            "NCCL_P2P_DISABLE",
            "GPU peer-to-peer is off: intra-node traffic goes through host memory",
        ),
        ("NCCL_SHM_DISABLE", "the shared-memory transport is off"),
        (
            "NCCL_IB_DISABLE",
            "NCCL's InfiniBand transport is off: inter-node traffic uses TCP sockets",
        ),
    ] {
        if env_is_true(env, k) && (k != "NCCL_IB_DISABLE" || has_ib(h)) {
            out.push(
                Check::new("nccl-setting", Status::Info, format!("{k}=1: {why}")).remedy(format!(
                    "Keep {k}=1 only as a deliberate workaround; it costs bandwidth."
                )),
            );
        }
    }
    let tuning: Vec<String> = [
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
    ]
    .iter()
    .filter_map(|k| env.get(*k).map(|v| format!("{k}={v}")))
    .collect();
    if !tuning.is_empty() {
        let mut c = Check::new(
            "nccl-tuning",
            Status::Info,
            "NCCL tuning overrides are set: they must be identical on every rank, or ranks disagree on buffer sizes",
        )
        .remedy("Set them in the launcher for all ranks alike (a mismatch shows as \"message truncated\").")
        .catalog("C26");
        for t in tuning {
            c = c.evidence(t);
        }
        out.push(c);
    }
    if let Some(p) = env.get("NCCL_PROFILER_PLUGIN") {
        if p.contains('/') && !Path::new(p).exists() {
            out.push(
                Check::new(
                    "profiler-plugin-missing",
                    Status::Warn,
                    "NCCL_PROFILER_PLUGIN names a file that does not exist",
                )
                .evidence(format!("NCCL_PROFILER_PLUGIN={p}"))
                .remedy("Point it at libnccl-profiler-ncclshim.so (absolute path) or unset it."),
            );
        }
    }
    if !env.contains_key("NCCL_DEBUG") {
        out.push(
            Check::new("nccl-debug", Status::Info, "NCCL_DEBUG is unset: NCCL's own log will not show why it failed")
                .remedy("NCCL_DEBUG=WARN costs nothing; the ncclshim recorder captures the error text either way."),
        );
    }
    match &f.nvidia_driver {
        Some(v) => out.push(
            Check::new("nvidia-driver", Status::Ok, "NVIDIA driver loaded").evidence(v.clone()),
        ),
        None => out.push(Check::new(
            "nvidia-driver",
            Status::Info,
            "no NVIDIA driver on this host (/proc/driver/nvidia/version absent)",
        )),
    }
    out
}

/// Candidate `libnccl.so*` files: the loader's cache and path, CUDA's directories, and the
/// `nvidia/nccl/lib` of every Python site-packages directory this host's python3 knows.
fn find_nccl_files() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(v) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(v.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
    }
    dirs.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/lib",
            "/usr/local/cuda/lib64",
            "/usr/lib/aarch64-linux-gnu",
        ]
        .iter()
        .map(PathBuf::from),
    );
    let sites = std::process::Command::new("python3")
        .args(["-c", "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)"])
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for s in sites.lines() {
        dirs.push(Path::new(s).join("nvidia/nccl/lib"));
        dirs.push(Path::new(s).join("torch/lib"));
    }
    let mut files: Vec<PathBuf> = Vec::new();
    if let Some(p) = ncclshim_host_facts::host::find_library("libnccl.so.2") {
        files.push(PathBuf::from(p));
    }
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libnccl.so") {
                files.push(e.path());
            }
        }
    }
    let mut seen = BTreeSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    files
}

/// `ncclGetVersion` of a library file, loading it into this (the CLI's) process.
fn nccl_version_by_loading(path: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: loading a library by path into the CLI's own process; NCCL's constructors do not
    // initialize CUDA. The handle is kept (never closed) so nothing it registered dangles.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if h.is_null() {
        return None;
    }
    // SAFETY: h is a valid handle; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(h, c"ncclGetVersion".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: ncclGetVersion has the C signature `ncclResult_t (int*)` in every NCCL 2.x.
    let f: extern "C" fn(*mut i32) -> i32 = unsafe { std::mem::transmute(sym) };
    let mut v = 0i32;
    (f(&mut v) == 0).then_some(i64::from(v))
}

/// Collects the facts of this host.
pub fn collect() -> Facts {
    let env = ncclshim_host_facts::env::environment();
    let nccl = find_nccl_files()
        .into_iter()
        .map(|p| InstalledNccl {
            version: nccl_version_by_loading(&p),
            path: p.display().to_string(),
        })
        .collect();
    Facts {
        env,
        host: ncclshim_host_facts::host::collect_host_facts(),
        nccl,
        nvidia_driver: std::fs::read_to_string("/proc/driver/nvidia/version")
            .ok()
            .and_then(|s| s.lines().next().map(str::to_owned)),
    }
}

/// Text rendering, one block per check, worst first.
pub fn render_text(checks: &[Check], color: bool) -> String {
    use owo_colors::OwoColorize;
    let mut sorted: Vec<&Check> = checks.iter().collect();
    sorted.sort_by_key(|c| std::cmp::Reverse(c.status));
    let mut s = String::new();
    for c in sorted {
        let tag = match c.status {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "WARN",
            Status::Error => "ERROR",
        };
        let tag = if !color {
            format!("[{tag:>5}]")
        } else {
            match c.status {
                Status::Ok => format!("[{:>5}]", tag.green()),
                Status::Info => format!("[{:>5}]", tag.blue()),
                Status::Warn => format!("[{:>5}]", tag.yellow()),
                Status::Error => format!("[{:>5}]", tag.red().bold()),
            }
        };
        let cat = c.catalog.map(|k| format!(" ({k})")).unwrap_or_default();
        s.push_str(&format!("{tag} {}{cat}\n", c.title));
        for e in &c.evidence {
            s.push_str(&format!("        {e}\n"));
        }
        if let Some(r) = &c.remedy {
            if c.status >= Status::Warn {
                s.push_str(&format!("        fix: {r}\n"));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ncclshim_host_facts::host::{NetIf, PathFact};

    fn host() -> HostFacts {
        HostFacts {
            hostname: "node1".into(),
            dev_shm_bytes: Some(64 << 30),
            memlock_unlimited: true,
            libibverbs_dlopen: false,
            netifs: vec![
                NetIf {
                    name: "lo".into(),
                    up: true,
                    loopback: true,
                    addrs: vec!["127.0.0.1".into()],
                },
                NetIf {
                    name: "eth0".into(),
                    up: true,
                    loopback: false,
                    addrs: vec!["10.0.0.5".into()],
                },
            ],
            ..HostFacts::default()
        }
    }

    fn facts(env: &[(&str, &str)], host: HostFacts, nccl: &[(&str, i64)]) -> Facts {
        Facts {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            host,
            nccl: nccl
                .iter()
                .map(|(p, v)| InstalledNccl {
                    path: p.to_string(),
                    version: Some(*v),
                })
                .collect(),
            nvidia_driver: None,
        }
    }

    fn ids(c: &[Check], status: Status) -> Vec<&'static str> {
        c.iter()
            .filter(|c| c.status == status)
            .map(|c| c.id)
            .collect()
    }

    #[test]
    fn a_healthy_host_has_no_warnings_or_errors() {
        let c = run_checks(&facts(
            &[("NCCL_DEBUG", "WARN")],
            host(),
            &[("/usr/lib/libnccl.so.2", 22703)],
        ));
        assert!(
            ids(&c, Status::Error).is_empty() && ids(&c, Status::Warn).is_empty(),
            "{c:#?}"
        );
    }

    #[test]
    fn forced_ib_without_verbs_is_an_error() {
        let c = run_checks(&facts(
            &[("NCCL_NET", "ib")],
            host(),
            &[("/x/libnccl.so.2", 23203)],
        ));
        let e = c
            .iter()
            .find(|c| c.id == "net-ib-unavailable")
            .expect("C01 check");
        assert_eq!(e.status, Status::Error);
        assert!(e.evidence.iter().any(|l| l.contains("not found")));
    }

    #[test]
    fn socket_ifname_typo_and_small_shm_and_two_versions() {
        let mut h = host();
        h.dev_shm_bytes = Some(64 << 20);
        let c = run_checks(&facts(
            &[("NCCL_SOCKET_IFNAME", "eht0")],
            h,
            &[("/a/libnccl.so.2", 21805), ("/b/libnccl.so.2", 22703)],
        ));
        assert_eq!(ids(&c, Status::Error), vec!["socket-ifname-no-match"]);
        let warns = ids(&c, Status::Warn);
        assert!(
            warns.contains(&"dev-shm-small") && warns.contains(&"nccl-installed"),
            "{warns:?}"
        );
        let ok = run_checks(&facts(&[("NCCL_SOCKET_IFNAME", "=eth0")], host(), &[]));
        assert!(ids(&ok, Status::Error).is_empty());
    }

    #[test]
    fn old_nccl_with_new_peermem_layout_warns() {
        let mut h = host();
        h.infiniband = vec!["mlx5_0".into()];
        h.libibverbs_dlopen = true;
        h.peermem = vec![
            PathFact {
                path: "/sys/kernel/mm/memory_peers/nv_mem/version".into(),
                exists: false,
                content: None,
            },
            PathFact {
                path: "/sys/module/nvidia_peermem/version".into(),
                exists: true,
                content: Some("1.0".into()),
            },
        ];
        let c = run_checks(&facts(&[], h.clone(), &[("/x/libnccl.so.2", 21903)]));
        assert!(ids(&c, Status::Warn).contains(&"gdr-peermem-undetected"));
        let fixed = run_checks(&facts(&[], h, &[("/x/libnccl.so.2", 22304)]));
        assert!(!ids(&fixed, Status::Warn).contains(&"gdr-peermem-undetected"));
    }
}
