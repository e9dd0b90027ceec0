//! What the checks read, collected from this host: the environment and host facts (the same
//! code the shim records with inside every rank, `ncclshim-host-facts`), the NCCL libraries
//! installed (each loaded once for its version) and the NVIDIA driver.

use ncclshim_host_facts::host::HostFacts;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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
