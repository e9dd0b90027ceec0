//! The application's profiler tags (NCCL 2.31's `ncclCollConfig_t::userProfilerTag`) reach the
//! report and the trace: the real shim preloaded into a program that calls the real PyPI
//! libnccl 2.32.3's eight `nccl*Config` collectives through a handle, each with a config as
//! `NCCL_COLLCONFIG_INITIALIZER` lays it out and its own tag (`tests/c/newer_apis.c`; NULL
//! communicator, so NCCL refuses each call itself and no GPU is needed).

mod support;

use ncclshim_diagnose::load;
use ncclshim_diagnose::model::JobModel;
use ncclshim_format::CallId;
use ncclshim_trace::build_trace;
use std::path::Path;
use std::process::Command;
use support::native::{nccl_cu12_lib, nccl_program, shim_so};

/// Runs `newer_apis` against the real 2.32.3 under the shim, dumps in `dir`.
fn tagged_calls(tmp: &Path, dir: &Path) {
    let prog = nccl_program(tmp, "newer_apis");
    let lib = nccl_cu12_lib().join("libnccl.so.2");
    let o = Command::new(prog)
        .arg(&lib)
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn a_configured_collectives_tag_is_named_by_the_model_and_the_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dumps");
    tagged_calls(tmp.path(), &dir);
    let files = load::find_dumps(&dir).unwrap();
    let loaded = load::load_files(&dir, &files, None);
    let job = JobModel::build(&loaded.dumps, |d| load::display_path(&dir, &d.path));
    let p = &job.processes[0];
    // Each configured call failed (NULL communicator) and is described with its own tag.
    for (i, id) in [
        CallId::NcclAllReduce,
        CallId::NcclBroadcast,
        CallId::NcclReduce,
        CallId::NcclAllGather,
        CallId::NcclReduceScatter,
        CallId::NcclAlltoAll,
        CallId::NcclGather,
        CallId::NcclScatter,
    ]
    .into_iter()
    .enumerate()
    {
        let (k, c) = p
            .calls
            .iter()
            .enumerate()
            .find(|(_, c)| c.call == Some(id))
            .unwrap_or_else(|| panic!("{id:?} recorded"));
        assert_eq!(p.coll_tag(c), 0x7a60 + i as u64, "{id:?}");
        let text = p.describe_call(k);
        let tag = format!("(tag {:#x}) returned 4", 0x7a60 + i);
        assert!(text.contains(&tag), "{text}");
    }
    // The trace shows the config record with its tag in hex.
    let t = build_trace(&loaded.dumps, &job);
    let tags: Vec<String> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["args"]["user_tag"].as_str().map(str::to_owned))
        .collect();
    assert!(tags.contains(&"0x7a60".to_owned()), "{tags:?}");
    assert!(tags.contains(&"0x7a67".to_owned()), "{tags:?}");
}

/// The profiler's side: the real plugin at ABI v7 with API events (the emulated 4-rank hang,
/// `hang-4ranks-v7-tagged`): where the waiting ranks are stuck names the operation's tag, and
/// the trace names each tagged CollApi slice.
#[test]
fn the_profilers_user_tag_is_named_by_the_report_and_the_trace() {
    let dir = support::native::root()
        .join("profiler-plugin/tests/fixtures/synthetic/hang-4ranks-v7-tagged");
    let r = ncclshim_diagnose::analyze_dir(&dir, None).expect("analyze");
    let v = support::schema::report_json(&r);
    let text = v.to_string();
    assert!(text.contains("(AllReduce, tag 0x7a6)"), "{text}");
    let files = load::find_dumps(&dir).unwrap();
    let loaded = load::load_files(&dir, &files, None);
    let job = JobModel::build(&loaded.dumps, |d| load::display_path(&dir, &d.path));
    let t = build_trace(&loaded.dumps, &job);
    let named = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "CollApi AllReduce tag 0x7a6" && e["args"]["user_tag"] == "0x7a6")
        .count();
    assert!(named > 0, "no tagged CollApi slice");
}
