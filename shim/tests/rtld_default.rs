//! A preloaded shim must not make NCCL look loaded when it is not (issue 35). A program that
//! asks `dlsym(RTLD_DEFAULT, "ncclGetVersion")`, `dlsym(dlopen(NULL), ...)` or Python's
//! `ctypes.CDLL(None).ncclGetVersion` before any libnccl is loaded gets "no such symbol"
//! without the shim; with it, it found the shim's wrapper (which returned `ncclInternalError`
//! and wrote a dump from a program with no NCCL), and took the wrong branch. Each program here
//! probes first, then loads the real PyPI libnccl by path and calls it; bare and preloaded, the
//! output is the same, and the calls made once NCCL is loaded are recorded.

mod common;

use common::*;
use ncclshim_format::schema::{args, ArgView};
use ncclshim_format::{CallId, RecordKind};
use std::path::{Path, PathBuf};
use std::process::Command;

fn libnccl() -> PathBuf {
    nccl_lib_dir(Wheel::Cu12).join("libnccl.so.2")
}

/// The cu11 wheel's NCCL (2.21), older than `ncclCommShrink` (2.27) and
/// `ncclCommWindowRegister` (2.28), which the shim exports.
fn older_libnccl() -> PathBuf {
    nccl_lib_dir(Wheel::Cu11).join("libnccl.so.2")
}

/// `tests/c/<name>.c` built as `out/<name>` (it loads libnccl itself, by path).
fn dl_program(out: &Path, name: &str) -> PathBuf {
    let prog = out.join(name);
    let o = Command::new("cc")
        .arg("-Wall")
        .arg("-o")
        .arg(&prog)
        .arg(repo_root().join(format!("tests/c/{name}.c")))
        .arg("-ldl")
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    prog
}

fn probe_program(out: &Path) -> PathBuf {
    dl_program(out, "rtld_probe")
}

/// (bare stdout, preloaded stdout, the dump's directory) of `program args`.
fn bare_and_preloaded(
    tmp: &Path,
    program: &Path,
    args: &[&std::ffi::OsStr],
) -> (String, String, PathBuf) {
    let bare = run(Command::new(program).args(args));
    let dir = tmp.join("dumps");
    let shimmed = run(preloaded(program, &dir).args(args));
    assert_eq!(bare.status.code(), shimmed.status.code());
    (
        String::from_utf8_lossy(&bare.stdout).into_owned(),
        String::from_utf8_lossy(&shimmed.stdout).into_owned(),
        dir,
    )
}

#[test]
fn a_c_program_probing_rtld_default_sees_no_nccl_until_it_loads_one() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = probe_program(tmp.path());
    let lib = libnccl();
    let (bare, shimmed, dir) =
        bare_and_preloaded(tmp.path(), &prog, &[lib.as_os_str(), "global".as_ref()]);
    assert!(
        bare.contains("RTLD_DEFAULT before loading: absent, dlerror set")
            && bare.contains("dlopen(NULL) before loading: absent, dlerror set")
            && bare.contains("RTLD_DEFAULT after loading: found rc=0"),
        "{bare}"
    );
    assert_eq!(shimmed, bare);
    // Once NCCL is loaded, the calls through the handle and through RTLD_DEFAULT are recorded.
    let d = single_dump(&dir);
    assert_eq!(calls(&d, CallId::NcclGetVersion).len(), 2, "{shimmed}");
}

/// With an NCCL that lacks an API the shim exports, a program probing for that API finds it
/// absent, as without the shim; the 2.32 NCCL has both.
#[test]
fn apis_the_loaded_nccl_lacks_stay_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = probe_program(tmp.path());
    for (lib, expect) in [(older_libnccl(), "absent"), (libnccl(), "found")] {
        let (bare, shimmed, dir) =
            bare_and_preloaded(tmp.path(), &prog, &[lib.as_os_str(), "global".as_ref()]);
        assert!(
            bare.contains(&format!("(ncclCommShrink) {expect}"))
                && bare.contains(&format!("(ncclCommWindowRegister) {expect}")),
            "{bare}"
        );
        assert_eq!(shimmed, bare, "{}", lib.display());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_local_load_is_called_and_recorded_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = probe_program(tmp.path());
    let lib = libnccl();
    let (bare, shimmed, dir) =
        bare_and_preloaded(tmp.path(), &prog, &[lib.as_os_str(), "local".as_ref()]);
    assert_eq!(shimmed, bare);
    assert!(bare.contains("by handle: rc=0 version="), "{bare}");
    assert_eq!(calls(&single_dump(&dir), CallId::NcclGetVersion).len(), 1);
}

#[test]
fn python_ctypes_finds_no_nccl_in_the_process_before_loading_it() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("probe.py");
    std::fs::write(
        &script,
        "import ctypes, sys\n\
         print('CDLL(None) has ncclGetVersion:', hasattr(ctypes.CDLL(None), 'ncclGetVersion'))\n\
         lib = ctypes.CDLL(sys.argv[1])\n\
         v = ctypes.c_int()\n\
         print('rc', lib.ncclGetVersion(ctypes.byref(v)), 'version', v.value)\n",
    )
    .unwrap();
    let python = PathBuf::from("python3");
    let lib = libnccl();
    let (bare, shimmed, dir) =
        bare_and_preloaded(tmp.path(), &python, &[script.as_os_str(), lib.as_os_str()]);
    assert!(
        bare.contains("CDLL(None) has ncclGetVersion: False"),
        "{bare}"
    );
    assert!(bare.contains("rc 0 version"), "{bare}");
    assert_eq!(shimmed, bare);
    assert_eq!(calls(&single_dump(&dir), CallId::NcclGetVersion).len(), 1);
}

/// NCCL's newer calls, its reduction-operator calls and the per-collective configuration
/// calls (2.31), through a handle (as bindings reach
/// them), on a NULL communicator (real NCCL rejects it, no GPU needed): the same results bare
/// and preloaded, and each call recorded with NCCL's return code.
#[test]
fn newer_calls_are_recorded_with_nccls_own_result() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = dl_program(tmp.path(), "newer_apis");
    let lib = libnccl();
    let (bare, shimmed, dir) = bare_and_preloaded(tmp.path(), &prog, &[lib.as_os_str()]);
    assert_eq!(shimmed, bare);
    let d = single_dump(&dir);
    for (name, id) in [
        ("ncclCommSuspend", CallId::NcclCommSuspend),
        ("ncclCommResume", CallId::NcclCommResume),
        ("ncclCommGetUniqueId", CallId::NcclCommGetUniqueId),
        ("ncclRedOpCreatePreMulSum", CallId::NcclRedOpCreatePreMulSum),
        ("ncclRedOpDestroy", CallId::NcclRedOpDestroy),
        // The per-collective configuration calls are recorded as their collective.
        ("ncclAllReduceConfig", CallId::NcclAllReduce),
        ("ncclBroadcastConfig", CallId::NcclBroadcast),
        ("ncclReduceConfig", CallId::NcclReduce),
        ("ncclAllGatherConfig", CallId::NcclAllGather),
        ("ncclReduceScatterConfig", CallId::NcclReduceScatter),
        ("ncclAlltoAllConfig", CallId::NcclAlltoAll),
        ("ncclGatherConfig", CallId::NcclGather),
        ("ncclScatterConfig", CallId::NcclScatter),
        ("ncclCommMemStats", CallId::NcclCommMemStats),
        ("ncclWinGetUserPtr", CallId::NcclWinGetUserPtr),
        ("ncclPutSignal", CallId::NcclPutSignal),
        ("ncclSignal", CallId::NcclSignal),
        ("ncclWaitSignal", CallId::NcclWaitSignal),
        ("ncclGroupSimulateEnd", CallId::NcclGroupSimulateEnd),
        ("ncclDevCommCreate", CallId::NcclDevCommCreate),
        ("ncclDevCommDestroy", CallId::NcclDevCommDestroy),
    ] {
        let rc: i32 = field(&bare, name, "rc")
            .parse()
            .unwrap_or_else(|_| panic!("{bare}"));
        let recorded = calls(&d, id);
        assert_eq!(recorded.len(), 1, "{name}: {bare}");
        assert_eq!(recorded[0].rc, rc, "{name}");
    }
    // Each configured collective's ncclCollConfig_t is recorded just before it, joined by
    // (comm, seq): the profiler tag the program set (0x7a60 + its index), minCTAs 2, the rest
    // unset (u64::MAX), the struct's version.
    let configs: Vec<_> = d
        .records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Event) && r.call() == Some(CallId::CollConfig))
        .collect();
    assert_eq!(configs.len(), 8, "one per configured collective");
    for (i, (c, id)) in configs
        .iter()
        .zip([
            CallId::NcclAllReduce,
            CallId::NcclBroadcast,
            CallId::NcclReduce,
            CallId::NcclAllGather,
            CallId::NcclReduceScatter,
            CallId::NcclAlltoAll,
            CallId::NcclGather,
            CallId::NcclScatter,
        ])
        .enumerate()
    {
        let v = args::CollConfig::from_args(&c.args);
        assert_eq!(v.user_tag, 0x7a60 + i as u64, "{id:?}");
        assert_eq!(
            (v.min_ctas, v.max_ctas, v.force_alg_selection),
            (2, u64::MAX, 1)
        );
        assert_eq!(v.version, 23203);
        let op = calls(&d, id)[0];
        let op_args = args::Collective::from_args(&op.args);
        assert_eq!((c.comm, v.seq), (op.comm, op_args.seq), "{id:?}");
        assert!(
            c.t_enter_ns <= op.t_enter_ns,
            "{id:?}: the config comes first"
        );
    }
    // ncclWaitSignal keeps its first descriptor: 1 signal from peer 0, of 1 descriptor.
    let wait = calls(&d, CallId::NcclWaitSignal)[0];
    assert_eq!(&wait.args[..3], &[1, 0, 1], "n_desc, peer0, op_cnt0");
    // The older NCCL (2.21) lacks the suspend family: absent with and without the shim.
    let (bare, shimmed, _) = bare_and_preloaded(tmp.path(), &prog, &[older_libnccl().as_os_str()]);
    assert!(bare.contains("ncclCommSuspend absent"), "{bare}");
    assert_eq!(shimmed, bare);
}
