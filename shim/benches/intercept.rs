//! What the shim adds to one intercepted NCCL call: real `ncclGetVersion` of the PyPI wheel's
//! libnccl, called directly (`pncclGetVersion`) and through the shim's exported wrapper (which
//! records the call at entry and completes it in place), in the same process and run.
//!
//! Run: `cargo bench -p ncclshim-shim --bench intercept` (fetches the NCCL wheel if needed).
//! A plain bench binary (alternating rounds, medians): robust on a shared 2-core machine.

use std::ffi::{c_int, CString};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

const ROUNDS: usize = 21;
const CALLS: u32 = 200_000;

fn libnccl() -> CString {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cache = root.join(".cache/nccl");
    let ok = Command::new("bash")
        .arg(root.join("scripts/fetch-nccl.sh"))
        .arg(&cache)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "scripts/fetch-nccl.sh failed");
    CString::new(cache.join("cu12/lib/libnccl.so.2").to_str().unwrap()).unwrap()
}

/// ns per call of `f` over one round.
fn round(f: GetVersion) -> f64 {
    let t = Instant::now();
    for _ in 0..CALLS {
        let mut v: c_int = 0;
        // SAFETY: v is a valid out-pointer.
        black_box(unsafe { f(black_box(&mut v)) });
    }
    t.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

/// ns per iteration of the floor any recorded call pays: two reads of the record clock (entry,
/// exit; the TSC where the dump uses it, else CLOCK_MONOTONIC) and one 128-byte record store.
fn floor_round(slot: &mut [u64; 16]) -> f64 {
    use ncclshim_dump::clock;
    clock::select();
    let t = Instant::now();
    for i in 0..CALLS {
        let rec = [u64::from(i) ^ clock::now(); 16];
        // SAFETY: slot is a valid, aligned 128-byte buffer; volatile keeps the store.
        unsafe { std::ptr::write_volatile(slot, rec) };
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(&mut slot[1], clock::now()) };
    }
    t.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs it once quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let dir = std::env::temp_dir().join(format!("ncclshim-bench-{}", std::process::id()));
    std::env::set_var("NCCLSHIM_DIR", &dir);
    let path = libnccl();
    // SAFETY: loading a real libnccl RTLD_LOCAL, as Python would; kept for the process lifetime.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen libnccl failed");
    // SAFETY: h is live; pncclGetVersion is `ncclResult_t (int*)`.
    let direct: GetVersion = unsafe {
        let p = libc::dlsym(h, c"pncclGetVersion".as_ptr());
        assert!(!p.is_null());
        std::mem::transmute::<*mut libc::c_void, GetVersion>(p)
    };
    let shim: GetVersion = black_box(ncclshim::nccl::exports::ncclGetVersion);
    let mut v: c_int = 0;
    // The first call creates the dump and takes the snapshots: kept out of the measurement.
    // SAFETY: v is a valid out-pointer.
    assert_eq!(unsafe { shim(&mut v) }, 0);
    assert!(v > 0);

    let rounds = if quick { 1 } else { ROUNDS };
    let (mut d, mut s, mut added, mut fl, mut beyond) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut slot = Box::new([0u64; 16]);
    for _ in 0..rounds {
        let a = round(direct);
        let b = round(shim);
        let f = floor_round(&mut slot);
        d.push(a);
        s.push(b);
        added.push(b - a);
        fl.push(f);
        beyond.push(b - a - f);
    }
    println!(
        "ncclGetVersion (NCCL {v}), record clock {:?}, {rounds} alternating rounds of {CALLS} calls, medians:",
        ncclshim_dump::clock::select()
    );
    println!("  direct (pncclGetVersion)       {:7.1} ns/call", median(d));
    println!("  through the shim (recorded)    {:7.1} ns/call", median(s));
    println!(
        "  added by the shim              {:7.1} ns/call",
        median(added)
    );
    println!(
        "  floor: 2 clock reads + 128 B   {:7.1} ns/call",
        median(fl)
    );
    println!(
        "  shim cost beyond the floor     {:7.1} ns/call",
        median(beyond)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
