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
//! Method: alternating rounds (variant A, then B, 21 times) of a fixed number of calls each;
//! the medians of the per-round times and of the per-round difference are printed, so drift
//! and other load on the machine hit both variants alike.
//!
//! Run: `cargo bench -p ncclshim-shim --bench driver` (needs `cc`; without `--bench`, as under
//! `cargo test --benches`, one short round checks that it works).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type Gpa2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type Release = unsafe extern "C" fn(u64) -> c_int;
type Init = unsafe extern "C" fn(u32) -> c_int;

const ROUNDS: usize = 21;

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

fn sym<T: Copy>(d: Dlsym, h: *mut c_void, name: &CStr) -> T {
    // SAFETY: looking up a function whose C type is T.
    let p = unsafe { d(h, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} not found");
    // SAFETY: as above.
    unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) }
}

fn time(calls: u32, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..calls {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(calls)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Alternating rounds of `a` and `b`; prints the medians and the median difference.
fn compare(label: &str, rounds: usize, calls: u32, mut a: impl FnMut(), mut b: impl FnMut()) {
    let (mut ta, mut tb, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let x = time(calls, &mut a);
        let y = time(calls, &mut b);
        ta.push(x);
        tb.push(y);
        diff.push(y - x);
    }
    println!(
        "  {label:<52} {:7.1} ns  {:7.1} ns  {:+7.1} ns",
        median(ta),
        median(tb),
        median(diff)
    );
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick { 1 } else { ROUNDS };
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

    println!(
        "{rounds} alternating rounds, medians:{:>37}  {:>10}  {:>10}",
        "A", "B", "B - A"
    );
    let calls = if quick { 1000 } else { 200_000 };
    compare(
        "cuMemRelease: direct A / wrapped B",
        rounds,
        calls,
        || {
            // SAFETY: cuMemRelease of the double with a non-zero handle.
            black_box(unsafe { direct(black_box(0x42)) });
        },
        || {
            // SAFETY: as above, through the shim's recording wrapper.
            black_box(unsafe { wrapped(black_box(0x42)) });
        },
    );
    let calls = if quick { 1000 } else { 50_000 };
    for (name, handle, what) in [
        (c"malloc", libc::RTLD_DEFAULT, "dlsym malloc (not cu*)"),
        (
            c"cuDeviceGet",
            libcuda,
            "dlsym cuDeviceGet (cu*, unwatched)",
        ),
        (c"cuMemRelease", libcuda, "dlsym cuMemRelease (watched)"),
    ] {
        compare(
            &format!("{what}: glibc A / shim B"),
            rounds,
            calls,
            || {
                // SAFETY: dlsym with a valid handle and NUL-terminated name.
                black_box(unsafe { glibc_dlsym(black_box(handle), black_box(name.as_ptr())) });
            },
            || {
                // SAFETY: as above, through the shim's exported dlsym.
                black_box(unsafe { shim_dlsym(black_box(handle), black_box(name.as_ptr())) });
            },
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
