//! Drives the plugin the way NCCL does with ABI v7: through its exported `ncclProfiler_v7`
//! table, with handles and contexts carried as integers so that they cross threads as NCCL's
//! do. Shared by the tests that need exact control over which thread makes which call.

#![allow(dead_code)]

use nccl_profiler_ncclshim::abi::StateArgsV4;
use nccl_profiler_ncclshim::v7::{self, ncclProfiler_v7};
use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;

/// A handle or a context as an integer.
#[derive(Clone, Copy)]
pub struct H(pub usize);

pub fn zeroed<T>() -> T {
    // SAFETY: descriptor types are integers, raw pointers and bools: all-zero is valid.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

/// v7 `init` for one rank of `nranks`; returns the context.
pub fn init(comm_id: u64, name: &CStr, nranks: i32) -> H {
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let mut mask = 0i32;
    // SAFETY: v7 init with valid out-pointers and a NUL-terminated name.
    let rc = unsafe {
        (ncclProfiler_v7.init)(
            &mut ctx,
            comm_id,
            &mut mask,
            name.as_ptr(),
            1,
            nranks,
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0);
    H(ctx as usize)
}

/// `startEvent`; the event must be wanted (a non-NULL handle).
pub fn start(ctx: H, d: &mut v7::Descr) -> H {
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid v7 descriptor and out-pointer, the plugin's exported entry point.
    unsafe { (ncclProfiler_v7.start_event)(ctx.0 as *mut c_void, &mut h, d) };
    assert!(!h.is_null());
    H(h as usize)
}

pub fn stop(h: H) {
    // SAFETY: a handle from start_event.
    unsafe { (ncclProfiler_v7.stop_event)(h.0 as *mut c_void) };
}

/// `recordEventState` with a GPU timer value (KernelCh state 22, KernelPhase state 31).
pub fn state(h: H, state: u32, p_timer: u64) {
    let mut a = StateArgsV4 { p_timer };
    // SAFETY: a live handle and valid state args.
    unsafe { (ncclProfiler_v7.record_event_state)(h.0 as *mut c_void, state as i32, &mut a) };
}

/// The variable that tells a re-run test binary it is the child.
pub const CHILD: &str = "NCCLSHIM_V7DRIVER_CHILD";

/// Whether this process is the child that [`run_child`] started.
pub fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs test `test` of this binary again in a child process (a process of its own: its own
/// mask, recorder and dump directory `dir`), with `env` set and `NCCLSHIM_PROFILE` set or
/// removed; asserts that it succeeded and returns its stdout and its one profiler dump.
pub fn run_child(
    test: &str,
    dir: &std::path::Path,
    profile: Option<&str>,
    env: &[(&str, String)],
) -> (String, std::path::PathBuf) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture"])
        .env(CHILD, "1")
        .env("NCCLSHIM_DIR", dir)
        .env_remove("NCCLSHIM_DISABLE")
        .envs(env.iter().map(|(k, v)| (k, v)));
    match profile {
        Some(p) => cmd.env("NCCLSHIM_PROFILE", p),
        None => cmd.env_remove("NCCLSHIM_PROFILE"),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dumps: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".prof.ncclshim"))
        .collect();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    (stdout, dumps[0].clone())
}
