//! Real NCCL (the PyPI `libnccl.so.2`, with its static cudart) against the libcuda TEST
//! DOUBLE: cudart's driver lookups must all go through the shim's hooks (the `dlsym` of
//! `cuGetProcAddress_v2`, then the self-lookup, then ~415 lookups through the re-fetched
//! pointer), and NCCL must fail with exactly the same rc and error text as without the shim.
// The hooks exist on x86_64 Linux only (naked-asm trampoline and stubs).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod driver_common;

use driver_common::common::{compile_driver, Wheel};
use driver_common::*;

/// Every watched driver function and the first `cudaVersion` that returns it, written out
/// independently of the shim's table.
const WATCHED: &[(&str, i32)] = &[
    ("cuGetProcAddress", 11030),
    ("cuMemExportToShareableHandle", 10020),
    ("cuMemImportFromShareableHandle", 10020),
    ("cuMemCreate", 10020),
    ("cuMemRelease", 10020),
    ("cuMemMap", 10020),
    ("cuMemUnmap", 10020),
    ("cuMemSetAccess", 10020),
    ("cuMemAddressReserve", 10020),
    ("cuMemAddressFree", 10020),
    ("cuMemRetainAllocationHandle", 11000),
    ("cuMemGetHandleForAddressRange", 11070),
    ("cuMulticastCreate", 12010),
    ("cuMulticastAddDevice", 12010),
    ("cuMulticastBindMem", 12010),
    ("cuMulticastBindAddr", 12010),
    ("cuMulticastUnbind", 12010),
    ("cuIpcGetMemHandle", 4010),
    ("cuIpcOpenMemHandle", 4010),
    ("cuIpcCloseMemHandle", 4010),
];

struct Run {
    rc: String,
    last_error: String,
    lookups_log: String,
}

fn run_init(w: Wheel, tmp: &std::path::Path, shim: bool) -> (Run, Option<std::path::PathBuf>) {
    let double = build_double(tmp);
    let prog = compile_driver(w, tmp, false);
    let tag = if shim { "shim" } else { "plain" };
    let log = tmp.join(format!("gpa-{tag}.log"));
    let dumps = tmp.join(format!("dumps-{tag}"));
    let out = run(command(&prog, &double, shim.then_some(dumps.as_path()))
        .arg("init")
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("LIBCUDA_DOUBLE_LOG", &log));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last_error = stdout
        .lines()
        .find_map(|l| l.strip_prefix("last_error="))
        .unwrap_or_else(|| panic!("{stdout}"))
        .to_owned();
    let run = Run {
        rc: field(&stdout, "ncclCommInitRank ", "rc"),
        last_error,
        lookups_log: std::fs::read_to_string(&log).unwrap_or_default(),
    };
    (run, shim.then_some(dumps))
}

fn same_failure_and_every_lookup_seen(w: Wheel, expect_gpa: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, _) = run_init(w, tmp.path(), false);
    let (shim, dumps) = run_init(w, tmp.path(), true);
    assert_ne!(plain.rc, "0", "no GPU here: init must fail");
    assert_eq!(
        shim.rc, plain.rc,
        "ncclCommInitRank rc changed under the shim"
    );
    assert_eq!(
        shim.last_error, plain.last_error,
        "NCCL's error text changed under the shim"
    );
    // The double saw the same lookups, in the same order, with the same answers.
    assert_eq!(shim.lookups_log, plain.lookups_log);
    let d = single_dump(&dumps.unwrap());
    let n = lookups(&d);
    assert!(n > 100, "only {n} driver lookups went through the shim");
    if expect_gpa {
        // Exactly: one dlsym of cuGetProcAddress_v2, then every cuGetProcAddress call the
        // double logged, which it can only have received through our wrappers.
        let lines: Vec<&str> = shim.lookups_log.lines().collect();
        assert_eq!(n, lines.len() as u64 + 1);
        assert!(lines
            .iter()
            .any(|l| l.starts_with("gpa v2 cuGetProcAddress 12000 0 0 0")));
        let watched_ok = lines
            .iter()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (name, ver, rc) = (f[2], f[3].parse::<i32>().unwrap(), f[5]);
                rc == "0" && WATCHED.iter().any(|&(w, min)| w == name && ver >= min)
            })
            .count() as u64;
        // The dlsym answer, the self-lookups at 11030 and 12000, cudart's cuIpc* lookups.
        assert_eq!(wrapped(&d), 1 + watched_ok);
        assert!(wrapped(&d) >= 7, "{}", wrapped(&d));
    } else {
        // cudart 11.0-era: every driver function is a plain dlsym on the libcuda handle.
        assert!(shim.lookups_log.is_empty());
        assert!(
            wrapped(&d) >= 3,
            "cuIpc{{Get,Open,Close}}MemHandle: {}",
            wrapped(&d)
        );
    }
}

#[test]
fn nccl_cu12_driver_lookups_all_pass_through_the_shim_and_nccl_fails_identically() {
    same_failure_and_every_lookup_seen(Wheel::Cu12, true);
}

#[test]
fn nccl_cu11_driver_lookups_by_dlsym_pass_through_the_shim_and_nccl_fails_identically() {
    same_failure_and_every_lookup_seen(Wheel::Cu11, false);
}
