//! The driver hooks against the libcuda TEST DOUBLE (`tests/doubles/libcuda`; no GPU here):
//! a C program reaches the driver exactly as NCCL's static cudart does, and the tests check
//! that the program sees the same results with and without the shim, and that the dump holds
//! every watched call with its arguments, CUresult, device identity and caller.
// The hooks exist on x86_64 Linux only (naked-asm trampoline and stubs).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod driver_common;

use driver_common::*;
use ncclshim_dump::CallId;
use ncclshim_format::reader::read_dump;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

struct Setup {
    _tmp: tempfile::TempDir,
    double: std::path::PathBuf,
    prog: std::path::PathBuf,
    dumps: std::path::PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let double = build_double(tmp.path());
    let prog = build_program(
        tmp.path(),
        "cudart_like",
        &["-ldl".into(), "-lpthread".into()],
    );
    let dumps = tmp.path().join("dumps");
    Setup {
        _tmp: tmp,
        double,
        prog,
        dumps,
    }
}

/// Runs `mode` without and with the shim; stdout must be identical. Returns the shim run's.
fn same_both_ways(s: &Setup, mode: &str, env: &[(&str, &str)]) -> String {
    let plain = run(command(&s.prog, &s.double, None)
        .arg(mode)
        .envs(env.iter().copied()));
    let shim = run(command(&s.prog, &s.double, Some(&s.dumps))
        .arg(mode)
        .envs(env.iter().copied()));
    let (a, b) = (
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shim.stdout),
    );
    assert_eq!(
        a, b,
        "mode {mode}: the program saw different results under the shim"
    );
    assert!(
        shim.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&shim.stderr)
    );
    b.into_owned()
}

#[test]
fn failing_import_is_recorded_with_rc_handle_type_fd_device_and_caller() {
    let s = setup();
    let env = [
        ("LIBCUDA_DOUBLE_IMPORT_RC", "101"),
        ("LIBCUDA_DOUBLE_PCI_BUS", "0x3b"),
        ("LIBCUDA_DOUBLE_DEVICE", "0"),
    ];
    let out = same_both_ways(&s, "import", &env);
    assert_eq!(field(&out, "import ", "rc"), "101");
    let fd = parse_num(&field(&out, "import ", "fd"));
    let d = single_dump(&s.dumps);
    let imports = calls_of(&d, CallId::CuMemImportFromShareableHandle);
    assert_eq!(imports.len(), 1, "{:?}", driver_calls(&d));
    let r = imports[0];
    assert_eq!(r.rc, 101);
    assert!(!r.in_flight());
    // The driver's own words, as NCCL would print them.
    let text = d.blob(r.blob).map(|b| b.text());
    assert_eq!(text.as_deref(), Some("invalid device ordinal"));
    assert_ne!(
        r.flags & ncclshim_dump::schema::slot_flags::HAS_ERROR_TEXT,
        0
    );
    assert_eq!(arg(r, "handle_type"), 1, "POSIX_FD");
    assert_eq!(arg(r, "os_handle"), fd);
    assert_eq!(arg(r, "device"), 0);
    assert_eq!(arg(r, "pci_bus_id"), 0x3b << 8, "0000:3b:00.0");
    assert_eq!(arg(r, "uuid_hi"), 0xa0a1_a2a3_a4a5_a6a7);
    assert_eq!(arg(r, "uuid_lo"), 0xa8a9_aaab_acad_aeaf);
    // Failed: the out-handle is not read back.
    assert_eq!(arg(r, "handle"), u64::MAX);
    assert!(arg(r, "caller") != 0);
    // The device's identity, once, as the GPU snapshot the CLI's GPU facts come from.
    let gpus = gpu_snapshots(&d);
    assert_eq!(gpus.len(), 1, "{gpus:?}");
    assert_eq!(gpus[0]["ordinal"], 0);
    assert_eq!(gpus[0]["pci_bus_id"], "0000:3b:00.0");
    assert_eq!(gpus[0]["uuid"], "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
    assert_eq!(gpus[0]["name"], "libcuda test double");
    // 1 dlsym + 11 lookups through the wrapped cuGetProcAddress pointers (the program's), of
    // which the dlsym, both self-lookups and the import were answered with wrappers.
    assert_eq!(lookups(&d), 12);
    assert_eq!(wrapped(&d), 4);
}

#[test]
fn caller_is_the_return_address_in_the_calling_program() {
    let s = setup();
    // A second import from a known place: the direct-dlsym mode calls cuMemRelease from main's
    // callee; the record's caller must lie inside the program's own mapping, not the shim's.
    let out = run(command(&s.prog, &s.double, Some(&s.dumps))
        .arg("direct")
        .env("CUDART_LIKE_PRINT_ADDR", "1"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("cuMemRelease rc=0"), "{stdout}");
    let d = single_dump(&s.dumps);
    let rel = calls_of(&d, CallId::CuMemRelease);
    assert_eq!(rel.len(), 1);
    let caller = arg(rel[0], "caller");
    let (lo, hi) = text_range_of(&s.prog, &field(&stdout, "mode_direct", "at"));
    assert!(
        (lo..hi).contains(&caller),
        "caller {caller:#x} not in mode_direct [{lo:#x},{hi:#x})"
    );
}

/// The run-time address range of `mode_direct`, from the program's printed address and the
/// symbol size `nm` reports.
fn text_range_of(prog: &std::path::Path, printed: &str) -> (u64, u64) {
    let nm = std::process::Command::new("nm")
        .arg("-S")
        .arg(prog)
        .output()
        .expect("nm");
    let syms = String::from_utf8_lossy(&nm.stdout);
    let size = syms
        .lines()
        .find(|l| l.ends_with(" mode_direct"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|s| u64::from_str_radix(s, 16).unwrap())
        .expect("mode_direct size");
    let start = parse_num(printed);
    (start, start + size)
}

#[test]
fn every_watched_call_is_recorded_with_its_arguments() {
    let s = setup();
    let out = same_both_ways(&s, "all", &[]);
    let d = single_dump(&s.dumps);
    let calls = driver_calls(&d);
    let names: Vec<String> = calls.iter().map(|r| r.call_name()).collect();
    assert_eq!(
        names,
        [
            "cuMemCreate",
            "cuMemAddressReserve",
            "cuMemMap",
            "cuMemMap",
            "cuMemSetAccess",
            "cuMemExportToShareableHandle",
            "cuMemImportFromShareableHandle",
            "cuMemRetainAllocationHandle",
            "cuMemGetHandleForAddressRange",
            "cuMemUnmap",
            "cuMemAddressFree",
            "cuMemRelease",
            "cuMemRelease",
            "cuMemRelease",
            "cuMemRelease",
            "cuMulticastCreate",
            "cuMulticastAddDevice",
            "cuMulticastBindMem",
            "cuMulticastBindAddr",
            "cuMulticastUnbind",
            "cuIpcGetMemHandle",
            "cuIpcOpenMemHandle",
            "cuIpcOpenMemHandle",
            "cuIpcCloseMemHandle",
        ]
    );
    for r in &calls {
        assert!(!r.in_flight(), "{}", r.call_name());
        assert_eq!(r.flags & ncclshim_dump::schema::slot_flags::RC_IS_CUDA, 1);
        assert!(arg(r, "caller") != 0);
    }
    let by = |id| calls_of(&d, id);
    // errno is the program's own, with and without the shim (compared above) and as set.
    assert_eq!(field(&out, "cuMemCreate ", "errno"), "4242");
    assert_eq!(field(&out, "cuMemRelease(0) ", "errno"), "4343");
    let create = by(CallId::CuMemCreate)[0];
    assert_eq!(create.rc, 0);
    assert_eq!(arg(create, "size"), 1 << 21);
    assert_eq!(arg(create, "prop_type"), 2);
    assert_eq!(arg(create, "handle_types"), 1);
    assert_eq!(arg(create, "location_type"), 1);
    assert_eq!(arg(create, "location_id"), 0);
    assert_eq!(
        arg(create, "handle"),
        parse_num(&field(&out, "cuMemCreate ", "handle"))
    );
    let va = parse_num(&field(&out, "cuMemAddressReserve ", "va"));
    let reserve = by(CallId::CuMemAddressReserve)[0];
    assert_eq!(
        (
            arg(reserve, "ptr"),
            arg(reserve, "size"),
            arg(reserve, "alignment")
        ),
        (va, 1 << 21, 1 << 16)
    );
    let maps = by(CallId::CuMemMap);
    assert_eq!((maps[0].rc, maps[1].rc), (0, 1));
    assert_eq!(arg(maps[1], "offset"), 1 << 22);
    assert_eq!(arg(maps[0], "handle"), arg(create, "handle"));
    let acc = by(CallId::CuMemSetAccess)[0];
    assert_eq!(
        (
            arg(acc, "count"),
            arg(acc, "location_type"),
            arg(acc, "access_flags")
        ),
        (1, 1, 3)
    );
    let exp = by(CallId::CuMemExportToShareableHandle)[0];
    let imp = by(CallId::CuMemImportFromShareableHandle)[0];
    // The fd the export produced is the fd the import consumed.
    assert_eq!(exp.rc, 0);
    assert_eq!(arg(exp, "shareable_handle"), arg(imp, "os_handle"));
    assert_eq!(imp.rc, 0);
    assert_eq!(
        arg(imp, "handle") - arg(imp, "os_handle"),
        parse_num(&field(
            &out,
            "cuMemImportFromShareableHandle ",
            "handle_minus_fd"
        ))
    );
    assert_eq!(
        arg(by(CallId::CuMemRetainAllocationHandle)[0], "handle"),
        0x3000_1234
    );
    let range = by(CallId::CuMemGetHandleForAddressRange)[0];
    assert_eq!((arg(range, "ptr"), arg(range, "handle_type")), (va, 1));
    assert!(arg(range, "handle") < 1 << 20, "a dma-buf fd");
    let rel = by(CallId::CuMemRelease);
    assert_eq!((rel[0].rc, rel[1].rc, arg(rel[1], "handle")), (0, 1, 0));
    // Failures carry the driver's text, interned: both rc=1 failures share one blob.
    assert_eq!(rel[0].blob, 0);
    assert_eq!(
        d.blob(rel[1].blob).unwrap().text(),
        "CUDA_ERROR_INVALID_VALUE"
    );
    assert_eq!(maps[1].blob, rel[1].blob);
    // The flags=2 lookup got its own wrapper copy calling its own target (801), the first
    // copy still calls the default one (0); the @14000 lookup was not wrapped (4 records).
    assert_eq!(field(&out, "cuMemRelease[ptds] ", "rc"), "801");
    assert_eq!((rel[2].rc, rel[3].rc), (801, 0));
    assert_eq!(field(&out, "cuMemRelease@14000 ", "rc"), "0");
    let mcc = by(CallId::CuMulticastCreate)[0];
    assert_eq!(
        (
            arg(mcc, "num_devices"),
            arg(mcc, "size"),
            arg(mcc, "handle_types")
        ),
        (2, 1 << 21, 1)
    );
    assert_eq!(arg(by(CallId::CuMulticastAddDevice)[0], "device"), 1);
    let bind = by(CallId::CuMulticastBindMem)[0];
    assert_eq!(bind.rc, 0, "the double checks all six arguments arrived");
    assert_eq!(
        (
            arg(bind, "mc_offset"),
            arg(bind, "mem_offset"),
            arg(bind, "size")
        ),
        (0x100, 0x200, 1 << 20)
    );
    let unbind = by(CallId::CuMulticastUnbind)[0];
    assert_eq!((arg(unbind, "device"), arg(unbind, "size")), (1, 1 << 20));
    let get = by(CallId::CuIpcGetMemHandle)[0];
    assert_eq!(
        (arg(get, "ptr"), arg(get, "handle_w0")),
        (0xabc000, 0xabc000)
    );
    assert_eq!(arg(get, "device"), 0);
    // Several calls on device 0: one GPU snapshot.
    assert_eq!(gpu_snapshots(&d).len(), 1);
    let opens = by(CallId::CuIpcOpenMemHandle);
    assert_eq!((arg(opens[0], "abi"), arg(opens[1], "abi")), (1, 2));
    assert_eq!(
        arg(opens[0], "ptr"),
        parse_num(&field(&out, "cuIpcOpenMemHandle@4010 ", "ptr"))
    );
    assert_eq!(
        arg(opens[1], "ptr"),
        parse_num(&field(&out, "cuIpcOpenMemHandle@11000 ", "ptr"))
    );
    assert_eq!(arg(opens[0], "handle_w0"), 0xabc000);
    assert_eq!(arg(opens[0], "flags"), 1);
    assert_eq!(
        arg(by(CallId::CuIpcCloseMemHandle)[0], "ptr"),
        arg(opens[1], "ptr")
    );
}

#[test]
fn v1_cuda11_path_is_wrapped_too() {
    let s = setup();
    let out = same_both_ways(&s, "v1", &[]);
    assert!(out.contains("dlsym cuGetProcAddress ok"), "{out}");
    let d = single_dump(&s.dumps);
    assert_eq!(driver_calls(&d).len(), 24);
    let opens = calls_of(&d, CallId::CuIpcOpenMemHandle);
    assert_eq!((arg(opens[0], "abi"), arg(opens[1], "abi")), (1, 2));
}

#[test]
fn direct_dlsym_of_watched_names_is_wrapped() {
    let s = setup();
    let out = same_both_ways(&s, "direct", &[]);
    assert!(out.contains("dlsym cuNotAThing missing"), "{out}");
    assert!(
        out.contains("dlsym(RTLD_DEFAULT, cuMemRelease) missing"),
        "{out}"
    );
    let d = single_dump(&s.dumps);
    let names: Vec<String> = driver_calls(&d).iter().map(|r| r.call_name()).collect();
    assert_eq!(names, ["cuMemRelease", "cuIpcOpenMemHandle"]);
    assert_eq!(arg(calls_of(&d, CallId::CuIpcOpenMemHandle)[0], "abi"), 2);
    assert_eq!(arg(calls_of(&d, CallId::CuMemRelease)[0], "handle"), 0x42);
}

#[test]
fn lookups_alone_create_no_dump() {
    let s = setup();
    let out = same_both_ways(&s, "nodriver", &[]);
    assert!(out.contains("dlsym(RTLD_DEFAULT, puts) libc"), "{out}");
    assert!(
        dump_files(&s.dumps).is_empty(),
        "{:?}",
        dump_files(&s.dumps)
    );
}

#[test]
fn sigkill_inside_import_leaves_it_in_flight_with_its_evidence() {
    let s = setup();
    let mut child = command(&s.prog, &s.double, Some(&s.dumps))
        .arg("import")
        .env("LIBCUDA_DOUBLE_IMPORT_SLEEP", "60")
        .env("LIBCUDA_DOUBLE_PCI_BUS", "0x17")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next().expect("double's line").unwrap();
    assert_eq!(line, "libcuda-double: import sleeping");
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
    let files = dump_files(&s.dumps);
    assert_eq!(files.len(), 1);
    let d = read_dump(&files[0]).unwrap();
    assert!(!d.header.clean_exit);
    let imports = calls_of(&d, CallId::CuMemImportFromShareableHandle);
    assert_eq!(imports.len(), 1);
    let r = imports[0];
    assert!(r.in_flight(), "the import never returned");
    assert_eq!(arg(r, "handle_type"), 1);
    assert!(
        arg(r, "os_handle") > 2 && arg(r, "os_handle") < 1 << 20,
        "an fd"
    );
    assert_eq!(arg(r, "device"), 0);
    assert_eq!(arg(r, "pci_bus_id"), 0x17 << 8);
}

#[test]
fn device_identity_stays_unknown_before_cuinit() {
    let s = setup();
    // cuInit fails: the driver is not initialized, cuCtxGetDevice fails, nothing is guessed.
    let out = same_both_ways(&s, "import", &[("LIBCUDA_DOUBLE_INIT_RC", "100")]);
    assert_eq!(
        field(&out, "import ", "rc"),
        "3",
        "the double's CUDA_ERROR_NOT_INITIALIZED"
    );
    let d = single_dump(&s.dumps);
    let r = calls_of(&d, CallId::CuMemImportFromShareableHandle)[0];
    assert_eq!(r.rc, 3);
    for a in ["device", "pci_bus_id", "uuid_hi", "uuid_lo"] {
        assert_eq!(arg(r, a), u64::MAX, "{a}");
    }
    assert!(gpu_snapshots(&d).is_empty());
}

#[test]
fn concurrent_threads_each_record_every_call_in_their_own_ring() {
    let s = setup();
    let out = same_both_ways(&s, "threads", &[]);
    assert!(out.contains("threads=4 calls=1000 ok=1"), "{out}");
    let d = single_dump(&s.dumps);
    let rel = calls_of(&d, CallId::CuMemRelease);
    assert_eq!(rel.len(), 4001);
    assert_eq!(
        d.header.counters[ncclshim_dump::layout::counters::EVENTS_SKIPPED],
        0
    );
    for t in 0..4u64 {
        let mine: Vec<_> = rel
            .iter()
            .filter(|r| arg(r, "handle") == 0x1000 + t)
            .collect();
        assert_eq!(mine.len(), 1000, "thread {t}");
        // One thread, one ring: all of a thread's calls carry its tid and ring.
        assert!(mine
            .iter()
            .all(|r| r.tid == mine[0].tid && r.ring == mine[0].ring));
        assert!(mine.iter().all(|r| r.rc == 0 && !r.in_flight()));
    }
    assert_eq!(d.summary.lost, 0);
    assert_eq!(d.summary.torn, 0);
}
