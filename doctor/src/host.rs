//! The host checks of `ncclshim doctor`: one function per check, each a pure function of the
//! collected facts ([`Facts`]), so they are tested on made-up hosts. Each looks for the
//! precondition of a catalog failure and says what it saw and what to change.

use crate::check::{Check, Status};
use crate::facts::{Facts, InstalledNccl};
use ncclshim_diagnose::knowledge::thresholds;
use ncclshim_diagnose::names::nccl_version_string;
use ncclshim_diagnose::rules::network::socket_ifname::filter_matches;
use ncclshim_host_facts::host::HostFacts;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Runs every check on collected facts: one result per check, in a fixed order, each with a
/// stable id. Severities follow what happens to a job: `error` when every job on this host
/// fails, `warn` when some jobs fail or silently lose performance, `info` for a deliberate
/// setting worth knowing, `ok` otherwise.
pub fn run_checks(f: &Facts) -> Vec<Check> {
    [
        nvidia_driver(f),
        nccl_installed(f),
        nccl_net(f),
        ibverbs(f),
        gdr_peermem(f),
        memlock(f),
        dev_shm(f),
        socket_ifname(f),
        nccl_transports(f),
        nccl_tuning(f),
        profiler_plugin(f),
        nccl_debug(f),
    ]
    .into()
}

/// The NVIDIA driver: without it every CUDA call, and so every NCCL communicator, fails.
fn nvidia_driver(f: &Facts) -> Check {
    match &f.nvidia_driver {
        Some(v) => Check::ok("nvidia-driver", "NVIDIA driver loaded")
            .evidence(v.clone())
            .value("version_line", v),
        None => Check::new(
            "nvidia-driver",
            Status::Error,
            "no NVIDIA driver on this host (/proc/driver/nvidia/version absent): every NCCL communicator init will fail",
        )
        .value("version_line", serde_json::Value::Null)
        .remedy("Run on a GPU node, or pass the GPUs into the container (docker --gpus all; Kubernetes: nvidia.com/gpu resources and the NVIDIA container runtime)."),
    }
}

/// Installed NCCL libraries and their versions (C23 / C03 start here).
fn nccl_installed(f: &Facts) -> Check {
    let versions: BTreeSet<i64> = f.nccl.iter().filter_map(|n| n.version).collect();
    let mut c = match (f.nccl.is_empty(), versions.len()) {
        (true, _) => Check::new("nccl-installed", Status::Warn, "no libnccl found on this host (a framework may still bring its own)")
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
        _ => Check::ok("nccl-installed", "NCCL is installed"),
    };
    for n in &f.nccl {
        let v = n
            .version
            .map(|v| nccl_version_string(v as u64))
            .unwrap_or_else(|| "version unknown".into());
        c = c.evidence(format!("{} ({v})", n.path));
    }
    c.value("libraries", &f.nccl)
}

/// NCCL_NET=IB without a usable IB stack (C01).
fn nccl_net(f: &Facts) -> Check {
    let env = &f.env;
    let h = &f.host;
    let net = env.get("NCCL_NET");
    let wants_ib = net.is_some_and(|n| n.trim().eq_ignore_ascii_case("ib"));
    let c = if wants_ib && (!h.libibverbs_dlopen || !has_ib(h)) {
        let mut c = Check::new(
            "nccl-net",
            Status::Error,
            "NCCL_NET=IB is set but this host cannot run NCCL's IB transport: communicator init will fail with ncclInvalidUsage",
        )
        .evidence(format!("NCCL_NET={}", net.map(String::as_str).unwrap_or_default()))
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
        c
    } else {
        match net {
            Some(n) => Check::ok("nccl-net", format!("NCCL_NET={n} can be used here")),
            None => Check::ok(
                "nccl-net",
                "NCCL_NET is unset: NCCL picks the network itself",
            ),
        }
    };

    c.value("NCCL_NET", net)
        .value("libibverbs", h.libibverbs_dlopen)
        .value("infiniband_devices", &h.infiniband)
}

/// InfiniBand without libibverbs (C01, silently).
fn ibverbs(f: &Facts) -> Check {
    let h = &f.host;
    if has_ib(h) && !h.libibverbs_dlopen {
        Check::new(
            "ibverbs",
            Status::Warn,
            "InfiniBand devices exist but libibverbs.so.1 cannot be found: NCCL silently falls back to TCP sockets",
        )
        .evidence(format!("InfiniBand devices: {}", h.infiniband.join(", ")))
        .remedy("Install rdma-core / libibverbs1 (inside the container image too).")
        .catalog("C01")
    } else if has_ib(h) {
        Check::ok("ibverbs", "InfiniBand devices and libibverbs.so.1 are present")
    } else {
        Check::ok("ibverbs", "no InfiniBand devices: NCCL uses TCP sockets between nodes")
    }
    .value("libibverbs", h.libibverbs_dlopen)
    .value("infiniband_devices", &h.infiniband)
}

/// GPUDirect RDMA detection (C05): IB only.
fn gdr_peermem(f: &Facts) -> Check {
    let h = &f.host;
    let module = peermem(h, "/sys/module/nvidia_peermem/version") == Some(true);
    let legacy = peermem(h, "memory_peers/nv_mem/version") == Some(true)
        || peermem(h, "memory_peers/nv_mem_nc/version") == Some(true);
    let old: Vec<&InstalledNccl> = f
        .nccl
        .iter()
        .filter(|n| n.version.is_some_and(|v| v < peermem_fixed_in()))
        .collect();
    let c = if !has_ib(h) {
        Check::ok(
            "gdr-peermem",
            "no InfiniBand: GPUDirect RDMA does not apply",
        )
    } else if module && !legacy && !old.is_empty() {
        let mut c = Check::new(
            "gdr-peermem",
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
        c
    } else if !module && !legacy {
        Check::new(
            "gdr-peermem",
            Status::Info,
            "InfiniBand is present but nvidia_peermem is not loaded: GPUDirect RDMA only through DMA-BUF",
        )
        .remedy("modprobe nvidia_peermem, or rely on DMA-BUF (kernel >= 5.12, recent driver).")
        .catalog("C05")
    } else {
        Check::ok(
            "gdr-peermem",
            "nvidia_peermem is loaded where this NCCL looks for it",
        )
    };

    c.value("nvidia_peermem_module", module)
        .value("memory_peers", legacy)
}

/// Locked memory for QP creation (C11): IB only. What counts as too low is the report's
/// threshold too (knowledge/thresholds.toml).
fn memlock(f: &Facts) -> Check {
    let h = &f.host;
    let c = match (has_ib(h), h.memlock_unlimited, h.memlock_soft_bytes) {
        (true, unlimited, Some(soft)) if thresholds::memlock_too_low(unlimited, Some(soft)) => Check::new(
            "memlock",
            Status::Warn,
            "the locked-memory limit is finite: ibv_create_qp / memory registration can fail under load",
        )
        .evidence(format!("RLIMIT_MEMLOCK soft limit: {soft} bytes"))
        .remedy("Run with `ulimit -l unlimited` (docker: --ulimit memlock=-1:-1; systemd: LimitMEMLOCK=infinity).")
        .catalog("C11"),
        (_, true, _) => Check::ok("memlock", "the locked-memory limit is unlimited"),
        _ => Check::ok("memlock", "no InfiniBand: the locked-memory limit does not matter to NCCL"),
    };

    c.value("unlimited", h.memlock_unlimited)
        .value("soft_bytes", h.memlock_soft_bytes)
}

/// /dev/shm (C07): writable by this user, then large enough.
fn dev_shm(f: &Facts) -> Check {
    let env = &f.env;
    let h = &f.host;
    let shm_disabled = env_is_true(env, "NCCL_SHM_DISABLE");

    match h.dev_shm_bytes {
            Some(_) if h.dev_shm_writable == Some(false) && !shm_disabled => Check::new(
                "dev-shm",
                Status::Error,
                "this user may not create files in /dev/shm: NCCL's shared-memory transport fails between ranks of one host",
            )
            .evidence(match (h.dev_shm_mode, h.dev_shm_uid) {
                (Some(m), Some(u)) => format!("/dev/shm mode {m:04o}, owner uid {u}"),
                _ => "/dev/shm is not writable".to_owned(),
            })
            .remedy("Make /dev/shm writable by every user (chmod 1777 /dev/shm, the tmpfs mount's mode=1777) or give the container its own (docker --ipc=private); workaround NCCL_SHM_DISABLE=1 (slower)."),
            // NCCL needs far more than Docker's default 64 MiB (catalog C07); the threshold is the
            // report's too (knowledge/thresholds.toml).
            Some(b) if thresholds::dev_shm_too_small(b) => Check::new(
                "dev-shm",
                Status::Warn,
                "/dev/shm is small: NCCL's shared-memory transport fails to create or extend its segments",
            )
            .evidence(format!("/dev/shm size: {} MiB", b >> 20))
            .remedy("Give the container more shared memory (docker --shm-size=16g or --ipc=host; Kubernetes: an emptyDir with medium Memory at /dev/shm).")
            .catalog("C07"),
            Some(b) => Check::ok("dev-shm", format!("/dev/shm has {} MiB", b >> 20)),
            None => Check::new("dev-shm", Status::Warn, "/dev/shm is missing").catalog("C07"),
        }
        .value("bytes", h.dev_shm_bytes)
        .value("writable", h.dev_shm_writable)
}

/// NCCL_SOCKET_IFNAME (C08).
fn socket_ifname(f: &Facts) -> Check {
    let env = &f.env;
    let h = &f.host;
    let up: Vec<&str> = h
        .netifs
        .iter()
        .filter(|i| i.up)
        .map(|i| i.name.as_str())
        .collect();
    let c = match env.get("NCCL_SOCKET_IFNAME") {
        Some(v) => {
            if filter_matches(v, &h.netifs) {
                Check::ok(
                    "socket-ifname",
                    format!("NCCL_SOCKET_IFNAME={v} selects an interface that is up"),
                )
            } else {
                Check::new(
                    "socket-ifname",
                    Status::Error,
                    "NCCL_SOCKET_IFNAME selects no interface that is up: bootstrap will fail with \"no socket interface found\"",
                )
                .evidence(format!("NCCL_SOCKET_IFNAME={v}"))
                .evidence(format!("interfaces up: {}", up.join(", ")))
                .remedy("Set NCCL_SOCKET_IFNAME to a prefix of an interface above (e.g. eth or ens), `=name` for an exact name, or unset it.")
                .catalog("C08")
            }
        }
        None => Check::ok(
            "socket-ifname",
            "NCCL_SOCKET_IFNAME is unset: NCCL picks an interface itself",
        ),
    };

    c.value("NCCL_SOCKET_IFNAME", env.get("NCCL_SOCKET_IFNAME"))
        .value("interfaces_up", &up)
}

/// Transports turned off: legal, but often the cause of a slow job.
fn nccl_transports(f: &Facts) -> Check {
    let env = &f.env;
    let h = &f.host;
    let off: Vec<(&str, &str)> = [
        (
            "NCCL_P2P_DISABLE",
            "GPU peer-to-peer is off: intra-node traffic goes through host memory",
        ),
        ("NCCL_SHM_DISABLE", "the shared-memory transport is off"),
        (
            "NCCL_IB_DISABLE",
            "NCCL's InfiniBand transport is off: inter-node traffic uses TCP sockets",
        ),
    ]
    .into_iter()
    .filter(|(k, _)| env_is_true(env, k) && (*k != "NCCL_IB_DISABLE" || has_ib(h)))
    .collect();
    let c = if off.is_empty() {
        Check::ok("nccl-transports", "no NCCL transport is turned off")
    } else {
        let mut c = Check::new(
            "nccl-transports",
            Status::Info,
            format!(
                "{} set: {}",
                off.iter()
                    .map(|(k, _)| format!("{k}=1"))
                    .collect::<Vec<_>>()
                    .join(", "),
                off.iter().map(|(_, w)| *w).collect::<Vec<_>>().join("; ")
            ),
        )
        .remedy("Keep these only as a deliberate workaround; they cost bandwidth.");
        for (k, _) in &off {
            c = c.evidence(format!("{k}=1"));
        }
        c
    };
    c.value("disabled", off.iter().map(|(k, _)| *k).collect::<Vec<_>>())
}

/// NCCL tuning overrides (identical on every rank, or ranks disagree).
fn nccl_tuning(f: &Facts) -> Check {
    let env = &f.env;
    let tuning: BTreeMap<&str, &String> = [
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
    ]
    .iter()
    .filter_map(|k| env.get(*k).map(|v| (*k, v)))
    .collect();
    let mut c = if tuning.is_empty() {
        Check::ok("nccl-tuning", "no NCCL tuning overrides are set")
    } else {
        Check::new(
            "nccl-tuning",
            Status::Info,
            "NCCL tuning overrides are set: they must be identical on every rank, or ranks disagree on buffer sizes",
        )
        .remedy("Set them in the launcher for all ranks alike (a mismatch shows as \"message truncated\").")
        .catalog("C26")
    };
    for (k, v) in &tuning {
        c = c.evidence(format!("{k}={v}"));
    }
    c.value("overrides", &tuning)
}

/// `NCCL_PROFILER_PLUGIN` names a file that exists.
fn profiler_plugin(f: &Facts) -> Check {
    let env = &f.env;
    let plugin = env.get("NCCL_PROFILER_PLUGIN");

    match plugin {
        Some(p) if p.contains('/') && !Path::new(p).exists() => Check::new(
            "profiler-plugin",
            Status::Warn,
            "NCCL_PROFILER_PLUGIN names a file that does not exist: NCCL runs without a profiler",
        )
        .evidence(format!("NCCL_PROFILER_PLUGIN={p}"))
        .remedy("Point it at libnccl-profiler-ncclshim.so (absolute path) or unset it."),
        Some(p) => Check::ok("profiler-plugin", format!("NCCL_PROFILER_PLUGIN={p}")),
        None => Check::ok(
            "profiler-plugin",
            "NCCL_PROFILER_PLUGIN is unset (ncclshim run sets it)",
        ),
    }
    .value("NCCL_PROFILER_PLUGIN", plugin)
}

/// `NCCL_DEBUG` is set.
fn nccl_debug(f: &Facts) -> Check {
    let env = &f.env;

    match env.get("NCCL_DEBUG") {
            None => Check::new(
                "nccl-debug",
                Status::Info,
                "NCCL_DEBUG is unset: NCCL's own log will not show why it failed",
            )
            .remedy("NCCL_DEBUG=WARN costs nothing; the ncclshim recorder captures the error text either way."),
            Some(v) => Check::ok("nccl-debug", format!("NCCL_DEBUG={v}")),
        }
        .value("NCCL_DEBUG", env.get("NCCL_DEBUG"))
}

/// First NCCL that finds `nvidia_peermem` where current kernels put it (catalog C05).
fn peermem_fixed_in() -> i64 {
    ncclshim_diagnose::rules::cuda::gdr_peermem::fixed_in() as i64
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::job_would_fail;
    use crate::report::{DoctorReport, FORMAT_VERSION};
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
                    ..NetIf::default()
                },
                NetIf {
                    name: "eth0".into(),
                    up: true,
                    loopback: false,
                    addrs: vec!["10.0.0.5".into()],
                    ..NetIf::default()
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
    fn a_healthy_host_has_no_warnings_or_errors_and_lists_every_check() {
        let mut f = facts(
            &[("NCCL_DEBUG", "WARN")],
            host(),
            &[("/usr/lib/libnccl.so.2", 22703)],
        );
        f.nvidia_driver = Some("NVRM version: 550.54.15".into());
        let c = run_checks(&f);
        assert!(
            ids(&c, Status::Error).is_empty() && ids(&c, Status::Warn).is_empty(),
            "{c:#?}"
        );
        assert_eq!(ids(&c, Status::Ok).len(), c.len(), "{c:#?}");
        let all: Vec<&str> = c.iter().map(|c| c.id).collect();
        assert_eq!(
            all,
            [
                "nvidia-driver",
                "nccl-installed",
                "nccl-net",
                "ibverbs",
                "gdr-peermem",
                "memlock",
                "dev-shm",
                "socket-ifname",
                "nccl-transports",
                "nccl-tuning",
                "profiler-plugin",
                "nccl-debug"
            ]
        );
        assert!(!job_would_fail(&c));
    }

    /// A /dev/shm this user may not create files in fails every job with two ranks on the host
    /// (NVIDIA/nccl#328), unless the shared-memory transport is off.
    #[test]
    fn a_dev_shm_this_user_cannot_write_is_an_error() {
        let mut h = host();
        h.dev_shm_writable = Some(false);
        h.dev_shm_mode = Some(0o755);
        h.dev_shm_uid = Some(0);
        let c = run_checks(&facts(&[], h.clone(), &[]));
        let shm = c.iter().find(|c| c.id == "dev-shm").unwrap();
        assert_eq!(shm.status, Status::Error, "{shm:#?}");
        assert!(
            shm.evidence.iter().any(|e| e.contains("mode 0755")),
            "{shm:#?}"
        );
        assert!(job_would_fail(&c));
        let c = run_checks(&facts(&[("NCCL_SHM_DISABLE", "1")], h, &[]));
        let shm = c.iter().find(|c| c.id == "dev-shm").unwrap();
        assert_eq!(shm.status, Status::Ok, "{shm:#?}");
    }

    #[test]
    fn no_driver_is_an_error_because_every_job_fails() {
        let c = run_checks(&facts(&[("NCCL_DEBUG", "WARN")], host(), &[]));
        assert_eq!(ids(&c, Status::Error), vec!["nvidia-driver"]);
        assert!(job_would_fail(&c));
        let f = facts(&[], host(), &[]);
        let v = serde_json::to_value(DoctorReport::new(&c, &f)).unwrap();
        assert_eq!(v["format_version"], FORMAT_VERSION);
        assert_eq!(v["job_would_fail"], true);
        assert_eq!(v["checks"][0]["id"], "nvidia-driver");
        assert_eq!(v["checks"][0]["status"], "error");
        assert!(v["checks"][0]["values"].is_object());
    }

    #[test]
    fn forced_ib_without_verbs_is_an_error() {
        let c = run_checks(&facts(
            &[("NCCL_NET", "ib")],
            host(),
            &[("/x/libnccl.so.2", 23203)],
        ));
        let e = c.iter().find(|c| c.id == "nccl-net").expect("C01 check");
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
        assert_eq!(
            ids(&c, Status::Error),
            vec!["nvidia-driver", "socket-ifname"]
        );
        let warns = ids(&c, Status::Warn);
        assert!(
            warns.contains(&"dev-shm") && warns.contains(&"nccl-installed"),
            "{warns:?}"
        );
        let ok = run_checks(&facts(&[("NCCL_SOCKET_IFNAME", "=eth0")], host(), &[]));
        assert_eq!(ids(&ok, Status::Error), vec!["nvidia-driver"]);
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
        assert!(ids(&c, Status::Warn).contains(&"gdr-peermem"));
        let fixed = run_checks(&facts(&[], h, &[("/x/libnccl.so.2", 22304)]));
        assert!(!ids(&fixed, Status::Warn).contains(&"gdr-peermem"));
    }
}
