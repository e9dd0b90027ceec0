//! What the driver hooks cost, measured in one process and one run:
//!
//! * `driver_call/cuMemRelease`: the libcuda TEST DOUBLE's `cuMemRelease` called through the
//!   pointer the real lookup returns (`direct`) and through the pointer the shim's wrapped
//!   `cuGetProcAddress_v2` hands out (`wrapped`: naked stub, record at entry, real call,
//!   completion in place). The double's function is a few instructions, so the difference is
//!   the shim's whole per-call cost.
//! * `dlsym`: glibc's `dlsym` vs the shim's exported `dlsym` (trampoline + decide + tail jump to
//!   glibc's), both called through function pointers, for a name the shim ignores after the
//!   two-byte test (`malloc`), a `cu*` name it checks and passes on (`cuDeviceGet`), and a
//!   watched one it answers with a wrapper (`cuMemRelease`).
//!
//! The shim is `dlopen`ed (`RTLD_LOCAL`) rather than preloaded so both variants run in the same
//! process; its `dlsym` forwards exactly as when preloaded (RTLD_NEXT from the shim finds
//! glibc in its own dependency scope). This bench does not link the shim's rlib, so its own
//! `libc::dlsym` is glibc's.
//!
//! Run: `cargo bench -p ncclshim-shim --bench driver` (needs `cc`).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::Command;

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type Gpa2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type Release = unsafe extern "C" fn(u64) -> c_int;
type Init = unsafe extern "C" fn(u32) -> c_int;

fn build_double(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = dir.join("libcuda.so.1");
    let ok = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-o"])
        .arg(&out)
        .arg(root.join("tests/doubles/libcuda/libcuda_double.c"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "cc libcuda double failed");
    out
}

fn shim_so() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    [
        deps.join("libncclshim.so"),
        deps.parent().unwrap().join("libncclshim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libncclshim.so not built")
}

fn open(path: &Path) -> *mut c_void {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loading a shared object for the process lifetime.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {} failed", path.display());
    h
}

fn sym<T: Copy>(d: Dlsym, h: *mut c_void, name: &std::ffi::CStr) -> T {
    // SAFETY: looking up a function whose C type is T.
    let p = unsafe { d(h, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} not found");
    // SAFETY: as above.
    unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) }
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("ncclshim-driver-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("NCCLSHIM_DIR", dir.join("dumps"));
    let libcuda = open(&build_double(&dir));
    let shim = open(&shim_so());
    let glibc_dlsym: Dlsym = libc::dlsym;
    let shim_dlsym: Dlsym = sym(glibc_dlsym, shim, c"dlsym");
    assert_ne!(glibc_dlsym as usize, shim_dlsym as usize);

    let init: Init = sym(glibc_dlsym, libcuda, c"cuInit");
    // SAFETY: the double's cuInit(0).
    assert_eq!(unsafe { init(0) }, 0);
    let direct: Release = sym(glibc_dlsym, libcuda, c"cuMemRelease");
    let gpa: Gpa2 = sym(shim_dlsym, libcuda, c"cuGetProcAddress_v2");
    let mut p: *mut c_void = std::ptr::null_mut();
    let mut status: c_int = -1;
    // SAFETY: the wrapped cuGetProcAddress_v2 with valid out-pointers.
    let rc = unsafe { gpa(c"cuMemRelease".as_ptr(), &mut p, 10020, 0, &mut status) };
    assert_eq!((rc, status), (0, 0));
    assert_ne!(p as usize, direct as usize, "expected the shim's wrapper");
    // SAFETY: the wrapper has cuMemRelease's type.
    let wrapped: Release = unsafe { std::mem::transmute::<*mut c_void, Release>(p) };
    // The first recorded call creates the dump: keep it out of the measurement.
    // SAFETY: the double's cuMemRelease accepts any non-zero handle.
    assert_eq!(unsafe { wrapped(0x42) }, 0);

    let mut g = c.benchmark_group("driver_call/cuMemRelease");
    // SAFETY (both closures): cuMemRelease of the double with a non-zero handle.
    g.bench_function("direct", |b| b.iter(|| unsafe { direct(black_box(0x42)) }));
    g.bench_function("wrapped", |b| {
        b.iter(|| unsafe { wrapped(black_box(0x42)) })
    });
    g.finish();

    let mut g = c.benchmark_group("dlsym");
    for (name, handle) in [
        (c"malloc", libc::RTLD_DEFAULT),
        (c"cuDeviceGet", libcuda),
        (c"cuMemRelease", libcuda),
    ] {
        let label = name.to_str().unwrap();
        for (variant, d) in [("glibc", glibc_dlsym), ("shim", shim_dlsym)] {
            g.bench_function(format!("{label}/{variant}"), |b| {
                // SAFETY: dlsym with a valid handle and NUL-terminated name.
                b.iter(|| unsafe { d(black_box(handle), black_box(name.as_ptr())) })
            });
        }
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
