//! The libraries that decide how NCCL behaves, as the loader has them mapped: every libnccl
//! (two builds in one process is failure C23), NCCL's net / profiler / tuner / env plugins,
//! libcuda and libcudart (driver older than runtime is C18), libibverbs, libfabric and
//! libtorch_cuda (mapped without any libnccl means NCCL is linked statically and invisible to
//! LD_PRELOAD).
//!
//! Versions are asked only of libraries that are already mapped (`dlopen(RTLD_NOLOAD)`). Neither
//! `ncclGetVersion` nor `cuDriverGetVersion` / `cudaRuntimeGetVersion` initializes CUDA.
//!
//! A copy of NCCL inside another object ([`EmbeddedNccl`]: torchcomms' NCCLX extension, linked
//! statically with every `nccl*` renamed `torchcomms_nccl*`; a framework exporting `pnccl*`) is
//! found by the names it exports ([`EMBEDDED_NCCL_SYMBOLS`]): its calls never reach an
//! `LD_PRELOAD` wrapper, and the report says so instead of reading an empty dump as "no NCCL".

use serde::{Deserialize, Serialize};
use std::ffi::{c_int, c_void, CStr, CString};

/// What a mapped library is, judged by its file name.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LibKind {
    Nccl,
    NcclNet,
    NcclProfiler,
    NcclTuner,
    NcclEnv,
    CudaDriver,
    CudaRuntime,
    Ibverbs,
    Libfabric,
    TorchCuda,
    Shim,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoadedLibrary {
    pub kind: LibKind,
    pub path: String,
    /// `ncclGetVersion` for libnccl, `cuDriverGetVersion` for libcuda, `cudaRuntimeGetVersion` for libcudart.
    pub version: Option<i32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Libraries {
    pub libs: Vec<LoadedLibrary>,
    /// Paths of every mapped libnccl, in load order.
    pub nccl_paths: Vec<String>,
    /// Version of the first mapped libnccl (the one the loader binds `nccl*` to).
    pub nccl_version: Option<i32>,
    pub cuda_driver: Option<i32>,
    pub cuda_runtime: Option<i32>,
    /// NCCL is linked into another object, where `LD_PRELOAD` cannot see its calls: libtorch_cuda
    /// is mapped but no libnccl is, or some object exports NCCL under its own name
    /// ([`Libraries::nccl_embedded`]).
    pub nccl_static: bool,
    /// Objects other than a libnccl that define NCCL's entry points themselves (absent in dumps
    /// of older recorders).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nccl_embedded: Vec<EmbeddedNccl>,
}

/// A copy of NCCL inside an object that is not a libnccl, found by an exported name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EmbeddedNccl {
    pub path: String,
    /// The name that showed it ([`EMBEDDED_NCCL_SYMBOLS`]).
    pub symbol: String,
    /// What that `GetVersion` returned (`None`: it failed).
    pub version: Option<i32>,
}

/// The names that show NCCL linked into an object, best first; each is NCCL's `int
/// GetVersion(int*)`. The same list, with its sources, is `diagnose/knowledge/static-nccl.toml`
/// (whose test checks the two agree; the shim cannot read that file). None starts with `nc` or
/// `cu`: the shim's `dlsym` serves those names itself, these go straight to glibc.
/// - `torchcomms_pncclGetVersion`, `torchcomms_ncclGetVersion`: torchcomms' NCCLX, whose build
///   renames every `nccl*` / `pnccl*` symbol `torchcomms_*` (objcopy --redefine-syms) so that its
///   static NCCLX does not clash with PyTorch's NCCL;
/// - `pncclGetVersion`: NCCL's profiling alias, exported by any object NCCL is linked into
///   without hidden visibility.
pub const EMBEDDED_NCCL_SYMBOLS: &[&str] = &[
    "torchcomms_pncclGetVersion",
    "torchcomms_ncclGetVersion",
    "pncclGetVersion",
];

/// How library versions are obtained. Nothing here ever loads a library: a caller that may
/// load one (the CLI's `doctor`) does that itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionProbe {
    /// Ask each already-mapped library through a `RTLD_NOLOAD` handle (safe inside a host process).
    NoLoad,
    /// Skip versions entirely.
    Skip,
}

/// Classifies a library by its path's file name; `None` for libraries that do not matter here.
pub fn classify(path: &str) -> Option<LibKind> {
    let base = path.rsplit('/').next().unwrap_or(path);
    let kind = if base.starts_with("libncclshim") || base.starts_with("libnccl_profiler_ncclshim") {
        LibKind::Shim
    } else if base.starts_with("libnccl-net") {
        LibKind::NcclNet
    } else if base.starts_with("libnccl-profiler") || base.starts_with("libnccl_profiler") {
        LibKind::NcclProfiler
    } else if base.starts_with("libnccl-tuner") {
        LibKind::NcclTuner
    } else if base.starts_with("libnccl-env") {
        LibKind::NcclEnv
    } else if base.starts_with("libnccl.so") {
        LibKind::Nccl
    } else if base.starts_with("libcuda.so") {
        LibKind::CudaDriver
    } else if base.starts_with("libcudart.so") {
        LibKind::CudaRuntime
    } else if base.starts_with("libibverbs.so") {
        LibKind::Ibverbs
    } else if base.starts_with("libfabric.so") {
        LibKind::Libfabric
    } else if base.starts_with("libtorch_cuda") {
        LibKind::TorchCuda
    } else {
        return None;
    };
    Some(kind)
}

/// Paths of every object the loader has mapped, in load order (the main program has an empty name
/// and is left out).
pub fn mapped_objects() -> Vec<String> {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the &mut Vec passed below, alive for the whole iteration; `info` is
        // valid during the callback and dlpi_name is NULL or NUL-terminated.
        let out = &mut *data.cast::<Vec<String>>();
        let name = (*info).dlpi_name;
        if !name.is_null() {
            let s = CStr::from_ptr(name).to_string_lossy();
            if !s.is_empty() {
                out.push(s.into_owned());
            }
        }
        0
    }
    let mut out: Vec<String> = Vec::new();
    // SAFETY: the callback only appends to `out`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&mut out as *mut Vec<String>).cast()) };
    out
}

/// Calls `int f(int*)` named `sym` in the already-mapped library at `path`.
fn version_via(path: &str, syms: &[&str]) -> Option<i32> {
    let c = CString::new(path).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already mapped (it never
    // runs constructors); the handle is released with dlclose below.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    let mut out = None;
    for s in syms {
        let cs = CString::new(*s).ok()?;
        // SAFETY: h is a valid handle, cs NUL-terminated.
        let f = unsafe { libc::dlsym(h, cs.as_ptr()) };
        if !f.is_null() {
            // SAFETY: every symbol in `syms` is a C function `int f(int*)` (ncclGetVersion,
            // cuDriverGetVersion, cudaRuntimeGetVersion); none initializes CUDA.
            let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
            let mut v: c_int = 0;
            // SAFETY: v is a valid out-pointer.
            if unsafe { f(&mut v) } == 0 {
                out = Some(v);
            }
            break;
        }
    }
    // SAFETY: balances the NOLOAD dlopen above (the library stays mapped by its other references).
    unsafe { libc::dlclose(h) };
    out
}

/// The copy of NCCL the already-mapped object at `path` defines itself, if any: a name of
/// [`EMBEDDED_NCCL_SYMBOLS`] that the object's own handle resolves to an address inside that very
/// object (a handle's lookup also searches its dependencies, which may include a libnccl).
pub fn embedded_nccl_in(path: &str) -> Option<EmbeddedNccl> {
    let c = CString::new(path).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already mapped (it never
    // loads one or runs constructors); the handle is released with dlclose below.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    let mut found = None;
    for name in EMBEDDED_NCCL_SYMBOLS {
        let Ok(cs) = CString::new(*name) else {
            continue;
        };
        // SAFETY: h is a valid handle, cs NUL-terminated.
        let f = unsafe { libc::dlsym(h, cs.as_ptr()) };
        if f.is_null() || !defined_in(f, path) {
            continue;
        }
        // SAFETY: every name in EMBEDDED_NCCL_SYMBOLS is NCCL's `ncclResult_t GetVersion(int*)`
        // under another name, which only writes the version (it initializes nothing).
        let get: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
        let mut v: c_int = 0;
        // SAFETY: v is a valid out-pointer.
        let version = (unsafe { get(&mut v) } == 0).then_some(v);
        found = Some(EmbeddedNccl {
            path: path.to_owned(),
            symbol: (*name).to_owned(),
            version,
        });
        break;
    }
    // SAFETY: balances the NOLOAD dlopen above (the object stays mapped by its other references).
    unsafe { libc::dlclose(h) };
    found
}

/// [`embedded_nccl_in`], asked once per object path in this process: the libraries are
/// snapshotted again at every communicator init, and a job that creates thousands of
/// communicators must not search every mapped object's scope each time (an object's exports do
/// not change while it is mapped). The table is only ever `try_lock`ed and never held during a
/// search, so a fork while another thread holds it (the child inherits it locked) costs a search,
/// never a deadlock.
fn embedded_nccl_cached(path: &str) -> Option<EmbeddedNccl> {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static SEEN: Mutex<BTreeMap<String, Option<EmbeddedNccl>>> = Mutex::new(BTreeMap::new());
    if let Ok(seen) = SEEN.try_lock() {
        if let Some(known) = seen.get(path) {
            return known.clone();
        }
    }
    let found = embedded_nccl_in(path);
    if let Ok(mut seen) = SEEN.try_lock() {
        seen.insert(path.to_owned(), found.clone());
    }
    found
}

/// Whether the address `f` lies in the object mapped from `path`.
fn defined_in(f: *mut c_void, path: &str) -> bool {
    // SAFETY: dladdr only reads the loader's tables into `info`, which we own; a zeroed
    // Dl_info is a valid initial value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `f` is an address dlsym returned.
    if unsafe { libc::dladdr(f, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while the object
    // stays mapped (it is: we hold a handle).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    name.to_bytes() == path.as_bytes()
}

/// The version `kind`'s version call reports, for an already mapped library.
pub fn version_of(kind: LibKind, path: &str) -> Option<i32> {
    match kind {
        LibKind::Nccl => version_via(path, &["pncclGetVersion", "ncclGetVersion"]),
        LibKind::CudaDriver => version_via(path, &["cuDriverGetVersion"]),
        LibKind::CudaRuntime => version_via(path, &["cudaRuntimeGetVersion"]),
        _ => None,
    }
}

/// Builds `Libraries` from a list of mapped paths (in load order).
pub fn libraries_from(paths: &[String], probe: VersionProbe) -> Libraries {
    let mut libs = Vec::new();
    for p in paths {
        let Some(kind) = classify(p) else { continue };
        let version = match probe {
            VersionProbe::NoLoad => version_of(kind, p),
            VersionProbe::Skip => None,
        };
        libs.push(LoadedLibrary {
            kind,
            path: p.clone(),
            version,
        });
    }
    let first = |k: LibKind| libs.iter().find(|l| l.kind == k).and_then(|l| l.version);
    let nccl_paths: Vec<String> = libs
        .iter()
        .filter(|l| l.kind == LibKind::Nccl)
        .map(|l| l.path.clone())
        .collect();
    // NCCL's own library, ours, and the libraries that only load beside NCCL (its plugins,
    // CUDA) hold no copy of NCCL worth naming; everything else is asked, only when versions may
    // be asked (the lookup runs NCCL's GetVersion).
    let nccl_embedded: Vec<EmbeddedNccl> = match probe {
        VersionProbe::NoLoad => paths
            .iter()
            .filter(|p| {
                !matches!(
                    classify(p),
                    Some(
                        LibKind::Nccl
                            | LibKind::Shim
                            | LibKind::NcclProfiler
                            | LibKind::CudaDriver
                            | LibKind::CudaRuntime
                    )
                )
            })
            .filter_map(|p| embedded_nccl_cached(p))
            .collect(),
        VersionProbe::Skip => Vec::new(),
    };
    Libraries {
        nccl_version: first(LibKind::Nccl),
        cuda_driver: first(LibKind::CudaDriver),
        cuda_runtime: first(LibKind::CudaRuntime),
        nccl_static: nccl_static(&nccl_paths, &libs, &nccl_embedded),
        nccl_paths,
        nccl_embedded,
        libs,
    }
}

/// Whether NCCL runs from a copy `LD_PRELOAD` cannot see: one embedded in another object, or
/// libtorch_cuda mapped without any libnccl (PyTorch built with NCCL linked in, as conda's).
fn nccl_static(nccl_paths: &[String], libs: &[LoadedLibrary], embedded: &[EmbeddedNccl]) -> bool {
    !embedded.is_empty()
        || (nccl_paths.is_empty() && libs.iter().any(|l| l.kind == LibKind::TorchCuda))
}

/// The libraries of this process.
pub fn collect_libraries(probe: VersionProbe) -> Libraries {
    libraries_from(&mapped_objects(), probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_by_file_name() {
        let c = |p| classify(p);
        assert_eq!(
            c("/x/site-packages/nvidia/nccl/lib/libnccl.so.2"),
            Some(LibKind::Nccl)
        );
        assert_eq!(c("/opt/libnccl-net-ofi.so"), Some(LibKind::NcclNet));
        assert_eq!(c("libnccl-net.so"), Some(LibKind::NcclNet));
        assert_eq!(
            c("/p/libnccl-profiler-ncclshim.so"),
            Some(LibKind::NcclProfiler)
        );
        assert_eq!(c("/p/libncclshim.so"), Some(LibKind::Shim));
        assert_eq!(c("/usr/lib/libcuda.so.1"), Some(LibKind::CudaDriver));
        assert_eq!(c("/t/libcudart.so.12"), Some(LibKind::CudaRuntime));
        assert_eq!(c("/t/libtorch_cuda.so"), Some(LibKind::TorchCuda));
        assert_eq!(c("/lib/libc.so.6"), None);
    }

    #[test]
    fn static_nccl_is_torch_cuda_without_libnccl() {
        let paths = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let l = libraries_from(
            &paths(&["/t/libtorch_cuda.so", "/lib/libc.so.6"]),
            VersionProbe::Skip,
        );
        assert!(l.nccl_static);
        let l = libraries_from(
            &paths(&["/t/libtorch_cuda.so", "/n/libnccl.so.2", "/m/libnccl.so.2"]),
            VersionProbe::Skip,
        );
        assert!(!l.nccl_static);
        assert_eq!(l.nccl_paths, ["/n/libnccl.so.2", "/m/libnccl.so.2"]);
    }

    /// An object that defines NCCL under another name makes the libraries "static NCCL", even
    /// beside a libnccl (torchcomms' NCCLX next to PyTorch's NCCL).
    #[test]
    fn an_embedded_copy_of_nccl_is_static_nccl() {
        let embedded = [EmbeddedNccl {
            path: "/x/torchcomms_ncclx/_comms_ncclx.so".into(),
            symbol: "torchcomms_ncclGetVersion".into(),
            version: Some(22703),
        }];
        let libnccl = [LoadedLibrary {
            kind: LibKind::Nccl,
            path: "/n/libnccl.so.2".into(),
            version: None,
        }];
        assert!(nccl_static(
            &["/n/libnccl.so.2".into()],
            &libnccl,
            &embedded
        ));
        assert!(!nccl_static(&["/n/libnccl.so.2".into()], &libnccl, &[]));
        // Names that the shim's dlsym would serve itself are never looked up here.
        for n in EMBEDDED_NCCL_SYMBOLS {
            assert!(!n.starts_with("nc") && !n.starts_with("cu"), "{n}");
        }
        // No object of this test process holds NCCL.
        assert!(collect_libraries(VersionProbe::NoLoad)
            .nccl_embedded
            .is_empty());
        // Older dumps have no such field.
        let old: Libraries = serde_json::from_str(
            r#"{"libs":[],"nccl_paths":[],"nccl_version":null,"cuda_driver":null,"cuda_runtime":null,"nccl_static":false}"#,
        )
        .unwrap();
        assert!(old.nccl_embedded.is_empty());
    }

    #[test]
    fn mapped_objects_include_libc() {
        let m = mapped_objects();
        assert!(m.iter().any(|p| p.contains("libc.so")), "{m:?}");
    }
}
