//! GPU check of the driver hooks against the REAL driver (ignored here: this machine has no GPU;
//! run with `cargo test -p ncclshim-shim --test driver_gpu -- --ignored` on a GPU machine).
//! `tests/c/driver/real_cumem.c` reaches libcuda as cudart does and does a cuMem
//! export/import/map round trip on device 0 plus one import that must fail; the program must
//! see the same results with and without the shim, and the dump must hold every call with the
//! real device's identity.
// The hooks exist on x86_64 Linux only (naked-asm trampoline and stubs).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod driver_common;

use driver_common::*;
use ncclshim_dump::CallId;
use std::process::Command;

#[test]
#[ignore = "needs an NVIDIA GPU and the real libcuda.so.1"]
fn real_driver_cumem_round_trip_is_recorded_with_device_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_program(tmp.path(), "real_cumem", &["-ldl".into()]);
    let dumps = tmp.path().join("dumps");
    let plain = run(&mut Command::new(&prog));
    let shim = run(Command::new(&prog)
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", &dumps));
    let (a, b) = (
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shim.stdout),
    );
    assert_eq!(a, b, "the program saw different results under the shim");
    assert!(b.contains("bad import fd="), "{b}");
    let d = single_dump(&dumps);
    let names: Vec<String> = driver_calls(&d).iter().map(|r| r.call_name()).collect();
    assert_eq!(
        names,
        [
            "cuMemCreate",
            "cuMemExportToShareableHandle",
            "cuMemImportFromShareableHandle",
            "cuMemAddressReserve",
            "cuMemMap",
            "cuMemSetAccess",
            "cuMemUnmap",
            "cuMemAddressFree",
            "cuMemRelease",
            "cuMemRelease",
            "cuMemImportFromShareableHandle",
        ]
    );
    let imports = calls_of(&d, CallId::CuMemImportFromShareableHandle);
    let (ok, bad) = (imports[0], imports[1]);
    assert_eq!(ok.rc, 0);
    assert_eq!(arg(ok, "device"), 0);
    assert_ne!(arg(ok, "pci_bus_id"), u64::MAX, "real PCI bus id");
    assert_ne!(
        (arg(ok, "uuid_hi"), arg(ok, "uuid_lo")),
        (u64::MAX, u64::MAX)
    );
    let exp = calls_of(&d, CallId::CuMemExportToShareableHandle)[0];
    assert_eq!(arg(exp, "shareable_handle"), arg(ok, "os_handle"));
    assert_ne!(bad.rc, 0);
    assert_eq!(
        arg(bad, "os_handle"),
        parse_num(&field(&b, "bad import", "fd"))
    );
    assert!(
        d.blob(bad.blob).is_some_and(|t| !t.text().is_empty()),
        "driver's error text"
    );
    let gpus = gpu_snapshots(&d);
    assert_eq!(gpus.len(), 1);
    assert!(
        gpus[0]["pci_bus_id"]
            .as_str()
            .is_some_and(|s| s.len() == 12),
        "{gpus:?}"
    );
    assert!(gpus[0]["uuid"]
        .as_str()
        .is_some_and(|s| s.starts_with("GPU-")));
    // Every lookup went through the wrapped pointer: 1 dlsym + 15 cuGetProcAddress calls.
    assert_eq!(lookups(&d), 16);
}

/// The same program against the libcuda TEST DOUBLE, so the GPU check's program and its counts
/// are known good before a GPU ever runs it.
#[test]
fn real_cumem_program_runs_against_the_double() {
    let tmp = tempfile::tempdir().unwrap();
    let double = build_double(tmp.path());
    let prog = build_program(tmp.path(), "real_cumem", &["-ldl".into()]);
    let dumps = tmp.path().join("dumps");
    let plain = run(&mut command(&prog, &double, None));
    let shim = run(&mut command(&prog, &double, Some(&dumps)));
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shim.stdout)
    );
    let d = single_dump(&dumps);
    assert_eq!(driver_calls(&d).len(), 11);
    assert_eq!(lookups(&d), 16);
    // The dlsym, the self-lookup, and the nine watched functions.
    assert_eq!(wrapped(&d), 11);
    assert_eq!(gpu_snapshots(&d).len(), 1);
}
