//! Host facts that explain NCCL failures the log alone does not: container hints and a small
//! `/dev/shm` (C07), the locked-memory limit (C11), the nvidia_peermem files NCCL probes for
//! GPUDirect RDMA (C05), whether libibverbs can be found and which HCAs exist (C01), and the
//! network interfaces `NCCL_SOCKET_IFNAME` is matched against, with prefixes, MTU and whether
//! they are virtual (C08, C09, C10: an address named in an error is resolved against them), the
//! InfiniBand/RoCE ports with state, link layer and GIDs (C12, C14, C30), the kernel's IOMMU/ACS
//! boot options (C13) and the GPUs the NVIDIA driver lists (C31).

use serde::{Deserialize, Serialize};
use std::ffi::{CStr, CString};
use std::path::Path;

/// The three files NCCL checks (`access(F_OK)`) to decide that GPUDirect RDMA is available.
pub const PEERMEM_FILES: [&str; 3] = [
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
];

/// Directories the dynamic loader searches when neither `LD_LIBRARY_PATH` nor the cache names a library.
const DEFAULT_LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PathFact {
    pub path: String,
    pub exists: bool,
    /// The first line of the file when it could be read.
    pub content: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ContainerHints {
    pub dockerenv: bool,
    pub containerenv: bool,
    /// `/proc/self/cgroup`, trimmed (docker / kubepods / containerd paths show here).
    pub cgroup: Option<String>,
    /// A best guess from the above: "docker", "podman", "kubernetes", "containerd", "lxc" or None.
    pub runtime: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetIf {
    pub name: String,
    pub up: bool,
    pub loopback: bool,
    /// `inet` / `inet6` addresses as text (no prefix length).
    pub addrs: Vec<String>,
    /// Prefix length of each address in `addrs`, same order (from the netmask).
    #[serde(default)]
    pub prefix_lens: Vec<u8>,
    /// `SIOCGIFMTU` in the process's network namespace, else `/sys/class/net/<if>/mtu`.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// A software interface (`/sys/devices/virtual/net/<if>`: veth, bridge, docker0, tun, ...),
    /// as opposed to one backed by a device.
    #[serde(default)]
    pub virtual_if: bool,
}

/// One port of an InfiniBand / RoCE device (`/sys/class/infiniband/<dev>/ports/<n>`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IbPort {
    pub device: String,
    pub port: u32,
    /// `state`, e.g. "4: ACTIVE".
    pub state: Option<String>,
    /// `link_layer`: "InfiniBand" or "Ethernet" (RoCE).
    pub link_layer: Option<String>,
    /// `rate`, e.g. "400 Gb/sec (4X NDR)".
    pub rate: Option<String>,
    /// The non-zero GIDs with their index and type (`gid_attrs/types/<i>`: "IB/RoCE v1",
    /// "RoCE v2"); what NCCL_IB_GID_INDEX selects from.
    pub gids: Vec<IbGid>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IbGid {
    pub index: u32,
    pub gid: String,
    pub kind: Option<String>,
}

/// One GPU as the NVIDIA kernel driver lists it (`/proc/driver/nvidia/gpus/<bus>/information`),
/// known without initializing CUDA.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DriverGpu {
    pub bus_id: String,
    pub model: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostFacts {
    pub hostname: String,
    pub boot_id: Option<String>,
    pub kernel: Option<String>,
    pub container: ContainerHints,
    pub dev_shm_bytes: Option<u64>,
    pub dev_shm_free_bytes: Option<u64>,
    /// `/dev/shm`'s permission bits (`0o1777` when anyone may create objects) and owner.
    #[serde(default)]
    pub dev_shm_mode: Option<u32>,
    #[serde(default)]
    pub dev_shm_uid: Option<u32>,
    /// Whether this process may create files in `/dev/shm` (write and search, checked with its
    /// effective ids: `faccessat(AT_EACCESS)`), as NCCL's `shm_open` needs.
    #[serde(default)]
    pub dev_shm_writable: Option<bool>,
    /// RLIMIT_MEMLOCK soft limit; None means unlimited.
    pub memlock_soft_bytes: Option<u64>,
    pub memlock_hard_bytes: Option<u64>,
    pub memlock_unlimited: bool,
    /// RLIMIT_NOFILE soft limit (None: unlimited): NCCL opens sockets and shared-memory files
    /// per peer and channel, so a small limit fails a large communicator's connect phase.
    #[serde(default)]
    pub nofile_soft: Option<u64>,
    pub peermem: Vec<PathFact>,
    /// Whether `libibverbs.so.1` can be found by the loader (mapped, LD_LIBRARY_PATH, ld.so.cache, default dirs).
    pub libibverbs_dlopen: bool,
    pub libibverbs_path: Option<String>,
    /// Entries of `/sys/class/infiniband` (HCA names).
    pub infiniband: Vec<String>,
    pub dev_infiniband: bool,
    pub netifs: Vec<NetIf>,
    pub cpu_count: Option<usize>,
    /// First line of `/proc/driver/nvidia/version`: the loaded kernel driver, `None` when no NVIDIA
    /// driver is loaded (CUDA then reports "driver version is insufficient", as for an old driver).
    #[serde(default)]
    pub nvidia_driver: Option<String>,
    /// `/dev/nvidia<N>` device nodes visible here (a container started without GPUs has none).
    #[serde(default)]
    pub nvidia_devices: Vec<String>,
    /// InfiniBand / RoCE ports (at most 16 devices x their ports).
    #[serde(default)]
    pub ib_ports: Vec<IbPort>,
    /// `/proc/cmdline` options about the IOMMU and PCI ACS (`intel_iommu=on`, `iommu=pt`,
    /// `pci=noacs`, ...): translated-mode IOMMUs and ACS break PCIe peer-to-peer (C13, C14).
    #[serde(default)]
    pub kernel_iommu_options: Vec<String>,
    /// Whether `/sys/kernel/iommu_groups` has groups (an IOMMU is active).
    #[serde(default)]
    pub iommu_groups: Option<bool>,
    /// GPUs listed by the NVIDIA driver.
    #[serde(default)]
    pub driver_gpus: Vec<DriverGpu>,
    /// `/dev/nvidia-nvswitch<N>` nodes or `/proc/driver/nvidia-nvswitch/devices/<bus>` entries
    /// (an NVSwitch system, where the Fabric Manager matters).
    #[serde(default)]
    pub nvswitch_devices: u32,
}

fn first_line(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s.lines().next().unwrap_or("").trim().to_owned())
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn container_hints() -> ContainerHints {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .map(|s| s.trim().chars().take(1024).collect::<String>());
    let dockerenv = Path::new("/.dockerenv").exists();
    let containerenv = Path::new("/run/.containerenv").exists();
    let cg = cgroup.as_deref().unwrap_or("");
    let runtime = if cg.contains("kubepods") {
        Some("kubernetes")
    } else if dockerenv || cg.contains("docker") {
        Some("docker")
    } else if containerenv || cg.contains("libpod") {
        Some("podman")
    } else if cg.contains("containerd") {
        Some("containerd")
    } else if cg.contains("lxc") {
        Some("lxc")
    } else {
        None
    };
    ContainerHints {
        dockerenv,
        containerenv,
        cgroup,
        runtime: runtime.map(str::to_owned),
    }
}

/// Total and free bytes of the filesystem at `path`.
pub fn fs_size(path: &str) -> Option<(u64, u64)> {
    let c = CString::new(path).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated; st is a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}

/// A path's permission bits (with sticky/setuid bits) and owner uid; None when it cannot be
/// stat'ed.
pub fn mode_and_owner(path: &str) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.mode() & 0o7777, m.uid()))
}

/// Whether this process may create files in directory `path`: write and search permission for
/// its effective ids (root passes unless the filesystem is read-only). None when it cannot be
/// asked (no such directory).
pub fn may_create_in(path: &str) -> Option<bool> {
    let c = CString::new(path).ok()?;
    // SAFETY: c is NUL-terminated and outlives the call; faccessat reads nothing else.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        return Some(true);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EACCES) | Some(libc::EROFS) | Some(libc::EPERM) => Some(false),
        _ => None,
    }
}

fn memlock() -> (Option<u64>, Option<u64>) {
    limit(libc::RLIMIT_MEMLOCK).unwrap_or((Some(0), Some(0)))
}

/// A resource limit's (soft, hard) values, None for unlimited; None when getrlimit fails.
fn limit(resource: libc::__rlimit_resource_t) -> Option<(Option<u64>, Option<u64>)> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is a valid out-pointer.
    if unsafe { libc::getrlimit(resource, &mut rl) } != 0 {
        return None;
    }
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Some((f(rl.rlim_cur), f(rl.rlim_max)))
}

fn path_fact(path: &str) -> PathFact {
    PathFact {
        path: path.to_owned(),
        exists: Path::new(path).exists(),
        content: first_line(path),
    }
}

fn dir_names(path: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Paths in an `ld.so.cache` image that end in `/<soname>`. Both the old and the new cache
/// formats keep library paths as NUL-terminated strings, so a scan of the string bytes finds
/// them without parsing either header.
pub fn ld_cache_paths(cache: &[u8], soname: &str) -> Vec<String> {
    let suffix = format!("/{soname}");
    cache
        .split(|&b| b == 0)
        .filter(|s| s.first() == Some(&b'/') && s.ends_with(suffix.as_bytes()))
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Where the loader would find `soname`, without loading it or running anything:
/// `LD_LIBRARY_PATH`, then `/etc/ld.so.cache`, then the default directories.
pub fn find_library(soname: &str) -> Option<String> {
    let from_env = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    for dir in from_env.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(soname);
        if p.exists() {
            return Some(p.to_string_lossy().into_owned());
        }
    }
    if let Ok(cache) = std::fs::read("/etc/ld.so.cache") {
        if let Some(p) = ld_cache_paths(&cache, soname)
            .into_iter()
            .find(|p| Path::new(p).exists())
        {
            return Some(p);
        }
    }
    DEFAULT_LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(soname))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
}

/// The MTU of interface `name` as this process's network namespace has it (`SIOCGIFMTU` on a
/// datagram socket, closed at once). `/sys/class/net` shows the namespace sysfs was mounted in,
/// which in a container or a network namespace is not always the process's own.
fn interface_mtu(name: &str) -> Option<u32> {
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: ifreq is plain old data; all zeros is a valid value (an empty name, mtu 0).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &b) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = b as libc::c_char;
    }
    // SAFETY: socket takes no pointers; the fd is closed below on every path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name (NUL-terminated: the name is shorter than IFNAMSIZ and
    // the rest is zero) and writes ifru_mtu into req, which outlives the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU as _, &mut req) };
    // SAFETY: fd came from socket above and is closed once.
    unsafe { libc::close(fd) };
    // SAFETY: after a successful SIOCGIFMTU the union holds ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    (rc == 0 && mtu > 0).then_some(mtu as u32)
}

/// Network interfaces with their addresses (`getifaddrs`), in kernel order.
pub fn network_interfaces() -> Vec<NetIf> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a valid out-pointer; freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut out: Vec<NetIf> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        let idx = match out.iter().position(|n| n.name == name) {
            Some(i) => i,
            None => {
                out.push(NetIf {
                    mtu: interface_mtu(&name).or_else(|| {
                        first_line(&format!("/sys/class/net/{name}/mtu"))
                            .and_then(|m| m.parse().ok())
                    }),
                    virtual_if: Path::new(&format!("/sys/devices/virtual/net/{name}")).exists(),
                    name,
                    up: flags & libc::IFF_UP as u32 != 0,
                    loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
                    addrs: Vec::new(),
                    prefix_lens: Vec::new(),
                });
                out.len() - 1
            }
        };
        // SAFETY: ifa_addr is null or points to a sockaddr whose family says its real type.
        if let Some(a) = unsafe { sockaddr_text(ifa.ifa_addr) } {
            out[idx].addrs.push(a);
            // SAFETY: ifa_netmask is null or a sockaddr of the address's family.
            let prefix = unsafe { netmask_prefix(ifa.ifa_netmask) }.unwrap_or(0);
            out[idx].prefix_lens.push(prefix);
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// # Safety
/// `sa` must be null or point to a valid sockaddr of the size its family implies.
unsafe fn sockaddr_text(sa: *const libc::sockaddr) -> Option<String> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*sa.cast::<libc::sockaddr_in>();
            Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).to_string())
        }
        libc::AF_INET6 => {
            let sin6 = &*sa.cast::<libc::sockaddr_in6>();
            Some(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr).to_string())
        }
        _ => None,
    }
}

/// Prefix length of a netmask (the number of one bits).
///
/// # Safety
/// `sa` must be null or point to a valid sockaddr of the size its family implies.
unsafe fn netmask_prefix(sa: *const libc::sockaddr) -> Option<u8> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*sa.cast::<libc::sockaddr_in>();
            Some(sin.sin_addr.s_addr.count_ones() as u8)
        }
        libc::AF_INET6 => {
            let sin6 = &*sa.cast::<libc::sockaddr_in6>();
            Some(
                sin6.sin6_addr
                    .s6_addr
                    .iter()
                    .map(|b| b.count_ones())
                    .sum::<u32>() as u8,
            )
        }
        _ => None,
    }
}

/// Bounds on what is read from `/sys/class/infiniband`, so a host with many HCAs and GID
/// tables cannot make the snapshot large (it shares the dump's arena with other records).
const MAX_IB_DEVICES: usize = 16;
const MAX_GIDS_PER_PORT: u32 = 16;

/// Ports, state, link layer and GIDs of every InfiniBand / RoCE device under `root`
/// (`/sys/class/infiniband` on a real host).
pub fn ib_ports(root: &Path) -> Vec<IbPort> {
    let mut out = Vec::new();
    for dev in dir_names(&root.to_string_lossy())
        .into_iter()
        .take(MAX_IB_DEVICES)
    {
        let ports_dir = root.join(&dev).join("ports");
        for port in dir_names(&ports_dir.to_string_lossy()) {
            let Ok(n) = port.parse::<u32>() else { continue };
            let pdir = ports_dir.join(&port);
            let read = |f: &str| first_line(&pdir.join(f).to_string_lossy());
            let mut gids = Vec::new();
            // Every index up to the bound: a table with holes (a container's namespace shows
            // only its own GIDs, a driver fills entries as addresses appear) goes on past them.
            for i in 0..MAX_GIDS_PER_PORT {
                let Some(gid) = read(&format!("gids/{i}")) else {
                    continue;
                };
                if gid.bytes().all(|b| b == b'0' || b == b':') {
                    continue;
                }
                gids.push(IbGid {
                    index: i,
                    gid,
                    kind: read(&format!("gid_attrs/types/{i}")).filter(|k| !k.is_empty()),
                });
            }
            out.push(IbPort {
                device: dev.clone(),
                port: n,
                state: read("state"),
                link_layer: read("link_layer"),
                rate: read("rate"),
                gids,
            });
        }
    }
    out
}

/// The boot options that decide whether PCIe peer-to-peer traffic can reach its peer.
pub fn iommu_options(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .take_while(|t| *t != "--")
        .filter(|t| {
            let key = t.split('=').next().unwrap_or(t);
            key.contains("iommu") || key == "pci" || key.contains("acs")
        })
        .map(str::to_owned)
        .collect()
}

/// GPUs listed by the NVIDIA kernel driver under `root` (`/proc/driver/nvidia/gpus`).
pub fn driver_gpus(root: &Path) -> Vec<DriverGpu> {
    dir_names(&root.to_string_lossy())
        .into_iter()
        .map(|bus| {
            let info = std::fs::read_to_string(root.join(&bus).join("information")).ok();
            let model = info.as_deref().and_then(|i| {
                i.lines()
                    .find_map(|l| l.strip_prefix("Model:"))
                    .map(|m| m.trim().to_owned())
            });
            DriverGpu { bus_id: bus, model }
        })
        .collect()
}

/// Collects every host fact. Only reads files and asks libc; never runs anything.
pub fn collect_host_facts() -> HostFacts {
    let shm = fs_size("/dev/shm");
    let shm_stat = mode_and_owner("/dev/shm");
    let (soft, hard) = memlock();
    let verbs = find_library("libibverbs.so.1");
    HostFacts {
        hostname: hostname(),
        boot_id: first_line("/proc/sys/kernel/random/boot_id"),
        kernel: first_line("/proc/sys/kernel/osrelease"),
        container: container_hints(),
        dev_shm_bytes: shm.map(|s| s.0),
        dev_shm_free_bytes: shm.map(|s| s.1),
        dev_shm_mode: shm_stat.map(|s| s.0),
        dev_shm_uid: shm_stat.map(|s| s.1),
        dev_shm_writable: may_create_in("/dev/shm"),
        memlock_soft_bytes: soft,
        memlock_hard_bytes: hard,
        memlock_unlimited: soft.is_none(),
        nofile_soft: limit(libc::RLIMIT_NOFILE).and_then(|l| l.0),
        peermem: PEERMEM_FILES.iter().map(|p| path_fact(p)).collect(),
        libibverbs_dlopen: verbs.is_some(),
        libibverbs_path: verbs,
        infiniband: dir_names("/sys/class/infiniband"),
        dev_infiniband: Path::new("/dev/infiniband").exists(),
        netifs: network_interfaces(),
        cpu_count: std::thread::available_parallelism().ok().map(|n| n.get()),
        nvidia_driver: first_line("/proc/driver/nvidia/version"),
        nvidia_devices: dir_names("/dev")
            .into_iter()
            .filter(|n| {
                n.strip_prefix("nvidia")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect(),
        ib_ports: ib_ports(Path::new("/sys/class/infiniband")),
        kernel_iommu_options: std::fs::read_to_string("/proc/cmdline")
            .map(|c| iommu_options(&c))
            .unwrap_or_default(),
        iommu_groups: std::fs::read_dir("/sys/kernel/iommu_groups")
            .ok()
            .map(|mut d| d.next().is_some()),
        driver_gpus: driver_gpus(Path::new("/proc/driver/nvidia/gpus")),
        // The device nodes, or the switches the nvswitch driver lists in procfs (a container
        // may see the latter without the nodes), whichever says more.
        nvswitch_devices: (dir_names("/dev")
            .iter()
            .filter(|n| {
                n.starts_with("nvidia-nvswitch")
                    && n[15..].bytes().all(|b| b.is_ascii_digit())
                    && n.len() > 15
            })
            .count() as u32)
            .max(dir_names("/proc/driver/nvidia-nvswitch/devices").len() as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ld_cache_scan_finds_paths_by_soname() {
        let img = b"glibc-ld.so.cache1.1\0\0libibverbs.so.1\0/usr/lib/x86_64-linux-gnu/libibverbs.so.1\0libc.so.6\0/lib/libc.so.6\0/opt/libibverbs.so.10\0";
        assert_eq!(
            ld_cache_paths(img, "libibverbs.so.1"),
            ["/usr/lib/x86_64-linux-gnu/libibverbs.so.1"]
        );
        assert_eq!(ld_cache_paths(img, "libc.so.6"), ["/lib/libc.so.6"]);
        assert!(ld_cache_paths(img, "libnccl.so.2").is_empty());
    }

    /// A directory without write permission for others: a process of another user may not
    /// create files in it; its mode and owner are read as they are. (As root only a read-only
    /// filesystem says no, so the negative side is asked of a user that is not the owner.)
    #[test]
    fn dev_shm_access_is_read_as_the_process_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("shm");
        std::fs::create_dir(&d).unwrap();
        let path = d.to_str().unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(mode_and_owner(path), Some((0o1777, me)));
        assert_eq!(may_create_in(path), Some(true));
        assert_eq!(may_create_in("/nonexistent-ncclshim-dir"), None);
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
        assert_eq!(mode_and_owner(path).map(|m| m.0), Some(0o555));
        if me != 0 {
            assert_eq!(may_create_in(path), Some(false), "r-x for its owner");
        }
    }

    #[test]
    fn finds_libc_like_the_loader() {
        // libc.so.6 is always findable; a made-up soname never is.
        assert!(find_library("libc.so.6").is_some());
        assert!(find_library("libdoes-not-exist-ncclshim.so.9").is_none());
    }

    #[test]
    fn host_facts_describe_this_machine() {
        let h = collect_host_facts();
        assert_eq!(h.hostname, hostname());
        assert!(!h.hostname.is_empty());
        assert!(h
            .netifs
            .iter()
            .any(|n| n.loopback && n.addrs.iter().any(|a| a == "127.0.0.1")));
        assert_eq!(h.peermem.len(), 3);
        assert_eq!(h.memlock_unlimited, h.memlock_soft_bytes.is_none());
        // The /dev/shm size is what statvfs reports; compare with an independent call.
        assert_eq!(h.dev_shm_bytes, fs_size("/dev/shm").map(|s| s.0));
        let json = serde_json::to_value(&h).unwrap();
        assert!(json["netifs"].is_array());
        assert!(json.get("libibverbs_dlopen").is_some());
        // Every address has its prefix; loopback's IPv4 one is /8.
        for n in &h.netifs {
            assert_eq!(n.addrs.len(), n.prefix_lens.len(), "{n:?}");
        }
        let lo = h.netifs.iter().find(|n| n.loopback).unwrap();
        let v4 = lo.addrs.iter().position(|a| a == "127.0.0.1").unwrap();
        assert_eq!(lo.prefix_lens[v4], 8);
        assert!(lo.virtual_if, "lo is a software interface");
        // The MTU as this process's network namespace has it (SIOCGIFMTU), the same as sysfs
        // reports where sysfs belongs to that namespace.
        assert_eq!(lo.mtu, super::interface_mtu("lo"));
        assert!(lo.mtu.is_some_and(|m| m > 0));
    }

    #[test]
    fn ib_ports_read_state_link_layer_and_gids() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let p = root.join("mlx5_0/ports/1");
        std::fs::create_dir_all(p.join("gids")).unwrap();
        std::fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
        std::fs::write(p.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(p.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::write(p.join("rate"), "100 Gb/sec (4X EDR)\n").unwrap();
        std::fs::write(
            p.join("gids/0"),
            "fe80:0000:0000:0000:0a00:27ff:fe00:0001\n",
        )
        .unwrap();
        std::fs::write(
            p.join("gids/1"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();
        std::fs::write(
            p.join("gids/2"),
            "0000:0000:0000:0000:0000:ffff:0a00:0002\n",
        )
        .unwrap();
        // A hole at 3-4 (a container's namespace shows only its own GIDs): index 5 is read.
        std::fs::write(
            p.join("gids/5"),
            "0000:0000:0000:0000:0000:ffff:0a00:0105\n",
        )
        .unwrap();
        std::fs::write(p.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
        std::fs::write(p.join("gid_attrs/types/2"), "RoCE v2\n").unwrap();
        let ports = ib_ports(&root);
        assert_eq!(ports.len(), 1);
        let port = &ports[0];
        assert_eq!((port.device.as_str(), port.port), ("mlx5_0", 1));
        assert_eq!(port.state.as_deref(), Some("4: ACTIVE"));
        assert_eq!(port.link_layer.as_deref(), Some("Ethernet"));
        // The zero GID (index 1) is skipped, and so are the indices that do not exist.
        let idx: Vec<u32> = port.gids.iter().map(|g| g.index).collect();
        assert_eq!(idx, [0, 2, 5]);
        assert_eq!(port.gids[1].kind.as_deref(), Some("RoCE v2"));
    }

    #[test]
    fn iommu_options_are_picked_from_the_kernel_command_line() {
        let c = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt pci=noacs quiet -- init_arg iommu=x";
        assert_eq!(
            iommu_options(c),
            ["intel_iommu=on", "iommu=pt", "pci=noacs"]
        );
        assert!(iommu_options("quiet splash").is_empty());
    }

    #[test]
    fn driver_gpus_name_model_and_bus() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let g = root.join("0000:17:00.0");
        std::fs::create_dir_all(&g).unwrap();
        std::fs::write(
            g.join("information"),
            "Model: \t\t NVIDIA GeForce RTX 4090\nIRQ:   \t 140\nBus Location: \t 0000:17:00.0\n",
        )
        .unwrap();
        let gpus = driver_gpus(&root);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].bus_id, "0000:17:00.0");
        assert_eq!(gpus[0].model.as_deref(), Some("NVIDIA GeForce RTX 4090"));
    }
}
