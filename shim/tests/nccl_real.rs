//! Real NCCL (the PyPI wheels' libnccl.so.2) under the preloaded shim, on a machine without a
//! GPU: real calls, real failures, NCCL's own error text, checked against what the program
//! itself saw and against the dump the shim left.

mod common;

use common::*;
use ncclshim::nccl::hash::{get_hash, uid_words};
use ncclshim_dump::{BlobKind, CallId, RecordKind};

fn version_and_snapshots(w: Wheel) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(w, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir)
        .args(["version", "--hf-token=hf_s3cret", "--password", "hunter2"])
        .env("NCCL_DEBUG", "WARN")
        .env("MY_API_TOKEN_X", "s3cret"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let printed: i64 = field(&stdout, "ncclGetVersion", "version").parse().unwrap();
    assert_eq!(printed, version_code(&wheel_version(w)));

    let d = single_dump(&dir);
    assert_eq!(d.header.writer_kind, Some(ncclshim_dump::WriterKind::Shim));
    let v = calls(&d, CallId::NcclGetVersion);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].rc, 0);
    assert!(!v[0].in_flight());
    assert_eq!(v[0].arg("version"), Some(printed as u64));

    let env = snapshots(&d, BlobKind::Environment);
    assert_eq!(env.len(), 1);
    assert_eq!(env[0]["NCCL_DEBUG"], "WARN");
    assert_eq!(env[0]["NCCLSHIM_DIR"], dir.to_string_lossy().as_ref());
    assert_eq!(env[0]["LD_PRELOAD"], shim_so().to_string_lossy().as_ref());
    assert!(
        env[0].get("MY_API_TOKEN_X").is_none(),
        "not an allowed prefix"
    );
    assert!(env[0].get("HOME").is_none());

    let libs = snapshots(&d, BlobKind::Libraries);
    assert_eq!(libs[0]["nccl_version"], printed);
    let lib_path = nccl_lib_dir(w).join("libnccl.so.2");
    assert_eq!(
        libs[0]["nccl_paths"][0],
        lib_path.to_string_lossy().as_ref()
    );
    assert_eq!(libs[0]["nccl_static"], false);
    assert!(libs[0]["cuda_driver"].is_null(), "no libcuda here");

    let host = snapshots(&d, BlobKind::HostFacts);
    assert_eq!(host[0]["hostname"], d.header.hostname.as_str());
    assert!(host[0]["netifs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["name"] == "lo"));
    let proc_ = snapshots(&d, BlobKind::Process);
    assert_eq!(proc_[0]["pid"], d.header.pid);
    assert_eq!(proc_[0]["cmdline"][1], "version");
    assert_eq!(
        proc_[0]["cmdline"].as_array().unwrap()[2..],
        ["--hf-token=<redacted>", "--password", "<redacted>"],
        "command-line secrets are redacted like the environment's"
    );
    assert!(d.header.clean_exit);
}

#[test]
fn get_version_and_snapshots_cu12() {
    version_and_snapshots(Wheel::Cu12);
}

#[test]
fn get_version_and_snapshots_cu11() {
    version_and_snapshots(Wheel::Cu11);
}

fn bad_socket_ifname(w: Wheel) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(w, tmp.path(), false);
    // What NCCL does without the shim: the reference for return codes.
    let bare = run(std::process::Command::new(&prog)
        .arg("uniqueid")
        .env("NCCL_SOCKET_IFNAME", "nonexistent0"));
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir)
        .arg("uniqueid")
        .env("NCCL_SOCKET_IFNAME", "nonexistent0"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let bare_out = String::from_utf8_lossy(&bare.stdout).into_owned();
    let rc: i32 = field(&stdout, "ncclGetUniqueId", "rc").parse().unwrap();
    assert_eq!(
        rc,
        field(&bare_out, "ncclGetUniqueId", "rc")
            .parse::<i32>()
            .unwrap()
    );
    assert_ne!(rc, 0, "a bad NCCL_SOCKET_IFNAME must fail for real");

    let d = single_dump(&dir);
    let u = calls(&d, CallId::NcclGetUniqueId);
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].rc, rc);
    assert_ne!(
        u[0].flags & ncclshim_dump::schema::slot_flags::HAS_ERROR_TEXT,
        0
    );
    let text = error_text(&d, u[0]).expect("NCCL's error text");
    assert!(text.contains("no socket interface found"), "{text}");
    let env = snapshots(&d, BlobKind::Environment);
    assert_eq!(env[0]["NCCL_SOCKET_IFNAME"], "nonexistent0");
}

#[test]
fn bad_socket_ifname_cu12() {
    bad_socket_ifname(Wheel::Cu12);
}

#[test]
fn bad_socket_ifname_cu11() {
    bad_socket_ifname(Wheel::Cu11);
}

fn init_without_gpu(w: Wheel, mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(w, tmp.path(), false);
    let bare = run(std::process::Command::new(&prog).arg(mode));
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir).arg(mode));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let bare_out = String::from_utf8_lossy(&bare.stdout).into_owned();
    let init_name = if mode == "initconfig" {
        "ncclCommInitRankConfig"
    } else {
        "ncclCommInitRank"
    };
    let rc: i32 = field(&stdout, init_name, "rc").parse().unwrap();
    assert_eq!(
        rc,
        field(&bare_out, init_name, "rc").parse::<i32>().unwrap()
    );
    assert_ne!(rc, 0, "no GPU here: init must fail");
    let last_error = field(&stdout, "last_error", "last_error");
    assert_eq!(
        last_error,
        field(&bare_out, "last_error", "last_error"),
        "the shim changed NCCL's last error"
    );

    let d = single_dump(&dir);
    // uniqueId hash: NCCL's getHash over the 128 bytes the program printed.
    let id = hex_bytes(&field(&stdout, "ncclGetUniqueId", "id"));
    let mut id128 = [0u8; 128];
    id128.copy_from_slice(&id);
    let expect_hash = get_hash(&id128);
    let u = calls(&d, CallId::NcclGetUniqueId);
    assert_eq!(u[0].rc, 0);
    assert_eq!(u[0].arg("uid_hash"), Some(expect_hash));
    let words = uid_words(&id128);
    assert_eq!(u[0].arg("uid0"), Some(words[0]));
    assert_eq!(u[0].arg("uid4"), Some(words[4]));

    let id_call = if mode == "initconfig" {
        CallId::NcclCommInitRankConfig
    } else {
        CallId::NcclCommInitRank
    };
    let i = calls(&d, id_call);
    assert_eq!(i.len(), 1);
    assert_eq!(i[0].rc, rc);
    assert_eq!(i[0].arg("nranks"), Some(1));
    assert_eq!(i[0].arg("rank"), Some(0));
    assert_eq!(i[0].arg("uid_hash"), Some(expect_hash));
    assert!(i[0].t_exit_ns.unwrap() >= i[0].t_enter_ns);
    assert_eq!(error_text(&d, i[0]).as_deref(), Some(last_error.as_str()));
    // No communicator came up.
    assert!(d
        .records
        .iter()
        .all(|r| r.call() != Some(CallId::CommCreated)));
    // A comm init refreshes the snapshots, but an unchanged environment is stored once.
    assert_eq!(snapshots(&d, BlobKind::Environment).len(), 1);

    if mode == "initconfig" {
        let cfg: Vec<serde_json::Value> = d
            .records_by_time()
            .into_iter()
            .filter(|r| r.kind() == Some(RecordKind::Event) && r.call() == Some(id_call))
            .filter_map(|r| d.blob(r.blob))
            .map(|b| serde_json::from_slice(&b.bytes).unwrap())
            .collect();
        assert_eq!(cfg.len(), 1);
        assert_eq!(cfg[0]["valid"], true);
        assert_eq!(cfg[0]["blocking"], 1);
        assert_eq!(cfg[0]["netName"], "Socket");
        // commName exists from NCCL 2.27: an older NCCL's struct version makes it ignored.
        if version_code(&wheel_version(w)) >= 22700 {
            assert_eq!(cfg[0]["commName"], "ncclshim-test");
        } else {
            assert!(cfg[0].get("commName").is_none(), "{}", cfg[0]);
        }
        assert_eq!(cfg[0]["version"], version_code(&wheel_version(w)));
        assert!(cfg[0].get("minCTAs").is_none());
    }
}

#[test]
fn init_without_gpu_cu12() {
    init_without_gpu(Wheel::Cu12, "init");
}

#[test]
fn init_without_gpu_cu11() {
    init_without_gpu(Wheel::Cu11, "init");
}

#[test]
fn init_config_without_gpu_cu12() {
    init_without_gpu(Wheel::Cu12, "initconfig");
}

#[test]
fn init_config_without_gpu_cu11() {
    init_without_gpu(Wheel::Cu11, "initconfig");
}

/// Python loads extension libraries RTLD_LOCAL: libnccl is then outside the global scope, where
/// `dlsym(RTLD_NEXT)` cannot see it, and the shim must find it through the loader instead.
fn python_rtld_local(w: Wheel) {
    let tmp = tempfile::tempdir().unwrap();
    let lib = compile_driver(w, tmp.path(), true);
    let dir = tmp.path().join("dumps");
    let script = repo_root().join("tests/python/nccl_ctypes.py");
    let out = run(preloaded(std::path::Path::new("python3"), &dir)
        .arg(&script)
        .arg(&lib)
        .arg("init"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let printed: i64 = field(&stdout, "ncclGetVersion", "version").parse().unwrap();
    let rc: i32 = field(&stdout, "ncclCommInitRank", "rc").parse().unwrap();
    let last_error = field(&stdout, "last_error", "last_error");
    let d = single_dump(&dir);
    assert_eq!(
        calls(&d, CallId::NcclGetVersion)[0].arg("version"),
        Some(printed as u64)
    );
    let i = calls(&d, CallId::NcclCommInitRank);
    assert_eq!(i[0].rc, rc);
    assert_eq!(error_text(&d, i[0]).as_deref(), Some(last_error.as_str()));
    let libs = snapshots(&d, BlobKind::Libraries);
    assert_eq!(libs[0]["nccl_version"], printed);
    let proc_ = snapshots(&d, BlobKind::Process);
    assert!(proc_[0]["cmdline"][1]
        .as_str()
        .unwrap()
        .ends_with("nccl_ctypes.py"));
}

#[test]
fn python_rtld_local_cu12() {
    python_rtld_local(Wheel::Cu12);
}

#[test]
fn python_rtld_local_cu11() {
    python_rtld_local(Wheel::Cu11);
}

/// Calls on a NULL communicator: real NCCL rejects them itself (no GPU needed), with its own text.
fn null_comm_calls(w: Wheel) {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(w, tmp.path(), false);
    let bare = run(std::process::Command::new(&prog).arg("nullcomm"));
    let dir = tmp.path().join("dumps");
    let out = run(preloaded(&prog, &dir).arg("nullcomm"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        stdout,
        String::from_utf8_lossy(&bare.stdout),
        "the shim changed a result or text"
    );
    let d = single_dump(&dir);
    for (name, id) in [
        ("ncclGroupStart", CallId::NcclGroupStart),
        ("ncclAllReduce", CallId::NcclAllReduce),
        ("ncclGroupEnd", CallId::NcclGroupEnd),
        ("ncclCommGetAsyncError", CallId::NcclCommGetAsyncError),
        ("ncclCommDestroy", CallId::NcclCommDestroy),
    ] {
        let line = stdout.lines().find(|l| l.starts_with(name)).unwrap();
        let rc: i32 = field(line, name, "rc").parse().unwrap();
        let text = line.split_once("last_error=").unwrap().1;
        let recs = calls(&d, id);
        assert_eq!(recs.len(), 1, "{name}");
        assert_eq!(recs[0].rc, rc, "{name}");
        if rc != 0 {
            assert_eq!(error_text(&d, recs[0]).as_deref(), Some(text), "{name}");
        } else {
            assert_eq!(
                recs[0].flags & ncclshim_dump::schema::slot_flags::HAS_ERROR_TEXT,
                0
            );
        }
    }
    let ar = calls(&d, CallId::NcclAllReduce)[0];
    assert!(error_text(&d, ar)
        .unwrap()
        .contains("comm argument is NULL"));
    assert_ne!(ar.flags & ncclshim_dump::schema::slot_flags::IN_GROUP, 0);
    assert_eq!(ar.arg("count"), Some(4));
    assert_eq!(
        ar.arg("seq"),
        Some(u64::MAX),
        "no communicator, no sequence"
    );
}

#[test]
fn null_comm_calls_cu12() {
    null_comm_calls(Wheel::Cu12);
}

#[test]
fn null_comm_calls_cu11() {
    null_comm_calls(Wheel::Cu11);
}

/// A framework that sets NCCL_* after the first NCCL call: the snapshot at communicator init
/// catches it (reason 1), and only because it changed.
#[test]
fn environment_changed_before_init_is_snapshotted_again() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    run(preloaded(&prog, &dir).arg("lateenv"));
    let d = single_dump(&dir);
    let env = snapshots(&d, BlobKind::Environment);
    assert_eq!(env.len(), 2);
    assert!(env[0].get("NCCL_LATE_SETTING").is_none());
    assert_eq!(env[1]["NCCL_LATE_SETTING"], "1");
    let reasons: Vec<u64> = d
        .records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::Snapshot))
        .filter(|r| r.arg("blob_kind") == Some(BlobKind::Environment as u64))
        .map(|r| r.arg("reason").unwrap())
        .collect();
    assert_eq!(reasons, [0, 1]);
    // Libraries did not change between the two points: stored once.
    assert_eq!(snapshots(&d, BlobKind::Libraries).len(), 1);
}
