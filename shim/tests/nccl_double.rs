//! Communicator paths that real NCCL cannot reach without a GPU, driven against a TEST DOUBLE of
//! libnccl (`tests/doubles/nccl_double.c`, named as such): sequence numbers, group flags,
//! commCreated join records, split hashes, non-blocking init with change-only async-error
//! polling, NCCL error text on a failed collective, and a function the loaded NCCL lacks.

mod common;

use common::*;
use ncclshim::nccl::hash::{get_hash, split_hash};
use ncclshim_dump::layout::counters;
use ncclshim_dump::schema::slot_flags;
use ncclshim_dump::{BlobKind, CallId, RecordKind};
use ncclshim_format::reader::Record;
use std::process::Command;

fn build_double(dir: &std::path::Path) -> std::path::PathBuf {
    let src = repo_root().join("shim/tests/doubles");
    let lib = dir.join("libnccl.so.2");
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wall", "-o"])
        .arg(&lib)
        .arg(src.join("nccl_double.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let prog = dir.join("nccl_ops");
    let o = Command::new("cc")
        .args(["-Wall", "-o"])
        .arg(&prog)
        .arg(src.join("nccl_ops.c"))
        .arg(format!("-L{}", dir.display()))
        .arg("-l:libnccl.so.2")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    prog
}

fn seqs(r: &Record) -> (u64, u64) {
    (r.arg("seq").unwrap(), r.arg("op_seq").unwrap())
}

#[test]
fn communicator_paths_against_the_double() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_double(tmp.path());
    let bare = run(&mut Command::new(&prog));
    assert!(String::from_utf8_lossy(&bare.stdout).contains("grow absent"));
    let dir = tmp.path().join("dumps");
    let out = run(&mut preloaded(&prog, &dir));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // Same results as without the shim, except that ncclCommGrow now links (to the shim) and
    // reports ncclInternalError because the loaded "NCCL" lacks it.
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("grow"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(&stdout),
        strip(&String::from_utf8_lossy(&bare.stdout))
    );
    assert_eq!(field(&stdout, "grow", "rc"), "3");

    let d = single_dump(&dir);
    let uid = calls(&d, CallId::NcclGetUniqueId)[0]
        .arg("uid_hash")
        .unwrap();
    let init = calls(&d, CallId::NcclCommInitRank);
    assert_eq!(init[0].rc, 0);
    assert_eq!(init[0].arg("uid_hash"), Some(uid));
    assert_eq!(init[0].arg("cuda_dev"), Some(3));
    let comm = init[0].comm;
    assert_ne!(comm, 0);

    // Collective sequence numbers: per comm over all ops, and per (comm, op) as NCCL counts.
    let ar = calls(&d, CallId::NcclAllReduce);
    let on_comm: Vec<_> = ar.iter().filter(|r| r.comm == comm).collect();
    assert_eq!(seqs(on_comm[0]), (0, 0));
    assert_eq!(seqs(on_comm[1]), (1, 1));
    assert_eq!(seqs(calls(&d, CallId::NcclBroadcast)[0]), (2, 0));
    assert_eq!(
        seqs(calls(&d, CallId::NcclBcast)[0]),
        (3, 1),
        "Bcast shares Broadcast's counter"
    );
    assert_eq!(seqs(calls(&d, CallId::NcclSend)[0]), (4, 0));
    assert_eq!(seqs(calls(&d, CallId::NcclRecv)[0]), (5, 0));
    assert_eq!(seqs(on_comm[2]), (6, 2));
    assert_eq!(on_comm[0].arg("count"), Some(16));
    assert_eq!(on_comm[0].arg("datatype"), Some(7));
    assert_eq!(calls(&d, CallId::NcclBroadcast)[0].arg("root"), Some(1));
    // Inside the user's group, and only there.
    assert_ne!(on_comm[0].flags & slot_flags::IN_GROUP, 0);
    assert_ne!(
        calls(&d, CallId::NcclRecv)[0].flags & slot_flags::IN_GROUP,
        0
    );
    assert_eq!(on_comm[2].flags & slot_flags::IN_GROUP, 0);
    assert_eq!(calls(&d, CallId::NcclGroupStart)[0].arg("depth"), Some(1));

    // Join records: the blocking init and the split child.
    let created: Vec<&Record> = d
        .records_by_time()
        .into_iter()
        .filter(|r| r.kind() == Some(RecordKind::CommInfo) && r.call() == Some(CallId::CommCreated))
        .collect();
    let first = created
        .iter()
        .find(|r| r.comm == comm)
        .expect("commCreated for the init");
    assert_eq!(first.arg("comm_hash"), Some(uid));
    assert_eq!(first.arg("nranks"), Some(2));
    assert_eq!(first.arg("rank"), Some(1));
    assert_eq!(first.arg("cuda_dev"), Some(3));
    assert_eq!(first.arg("nccl_version"), Some(22800));
    let split = calls(&d, CallId::NcclCommSplit)[0];
    let child = split.arg("new_comm").unwrap();
    assert_eq!(split.arg("comm_hash"), Some(split_hash(uid, 1, 5)));
    let child_rec = created
        .iter()
        .find(|r| r.comm == child)
        .expect("commCreated for the child");
    assert_eq!(child_rec.arg("comm_hash"), Some(split_hash(uid, 1, 5)));
    assert_eq!(child_rec.arg("nranks"), Some(1));
    let child_ar: Vec<_> = ar.iter().filter(|r| r.comm == child).collect();
    assert_eq!(seqs(child_ar[0]), (0, 0), "a new comm counts from 0");

    // Non-blocking init: InProgress, then polls recorded only when the value changes.
    let nb = calls(&d, CallId::NcclCommInitRankConfig)[0];
    assert_eq!(nb.rc, 7);
    assert_eq!(
        nb.flags & slot_flags::HAS_ERROR_TEXT,
        0,
        "InProgress is not a failure"
    );
    let polls = calls(&d, CallId::NcclCommGetAsyncError);
    let values: Vec<_> = polls
        .iter()
        .map(|r| r.arg("async_error").unwrap())
        .collect();
    assert_eq!(values, [7, 0], "6 polls, 2 changes");
    assert_eq!(polls[1].arg("previous"), Some(7));
    assert_eq!(d.header.counters[counters::SHIM_ASYNC_POLLS], 4);
    let nb_created = created
        .iter()
        .find(|r| r.comm == nb.comm)
        .expect("commCreated after the init completed");
    assert!(nb_created.t_enter_ns > polls[1].t_enter_ns);
    assert_eq!(nb_created.arg("rank"), Some(0));
    assert_eq!(
        nb_created.arg("comm_hash"),
        Some(get_hash(&{
            // The double's uniqueId (nccl_double.c): magic, AF_INET, port 8080, 127.0.0.1.
            let mut id = [0u8; 128];
            id[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
            id[8] = 2;
            id[10] = 0x1f;
            id[11] = 0x90;
            id[12] = 127;
            id[15] = 1;
            id
        }))
    );
    let cfg_event = d
        .records_by_time()
        .into_iter()
        .find(|r| {
            r.kind() == Some(RecordKind::Event) && r.call() == Some(CallId::NcclCommInitRankConfig)
        })
        .unwrap();
    let cfg: serde_json::Value =
        serde_json::from_slice(&d.blob(cfg_event.blob).unwrap().bytes).unwrap();
    assert_eq!(cfg["blocking"], 0);

    // A failed collective carries the library's own last-error text.
    let bad = ar.iter().find(|r| r.comm == 0).unwrap();
    assert_eq!(bad.rc, 4);
    assert_eq!(error_text(&d, bad).as_deref(), Some("double: invalid comm"));

    // The missing function: ncclInternalError and one note naming it.
    let grow = calls(&d, CallId::NcclCommGrow);
    assert!(grow.is_empty(), "nothing to forward to, so no call record");
    let notes: Vec<String> = d
        .records
        .iter()
        .filter(|r| r.call() == Some(CallId::RecorderNote))
        .filter_map(|r| d.blob(r.blob))
        .filter(|b| b.kind() == Some(BlobKind::Text))
        .map(|b| b.text())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("ncclCommGrow")),
        "{notes:?}"
    );

    assert_eq!(calls(&d, CallId::NcclCommDestroy)[0].rc, 0);
}
