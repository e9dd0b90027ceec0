//! NCCL linked statically into libtorch_cuda is invisible to LD_PRELOAD; the dump must say so
//! (header flag `nccl_static`) as soon as anything makes the shim record. Uses a library named
//! libtorch_cuda.so that is a TEST DOUBLE (`tests/doubles/torch_cuda_double.c`).

mod common;

use common::*;
use ncclshim_dump::{BlobKind, CallId};
use std::process::Command;

#[test]
fn torch_cuda_without_libnccl_sets_the_static_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let src = repo_root().join("shim/tests/doubles");
    let t = tmp.path();
    let cc = |args: &[&str]| {
        let o = Command::new("cc")
            .args(args)
            .current_dir(t)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let lib_src = src.join("torch_cuda_double.c");
    let prog_src = src.join("static_nccl.c");
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        "libtorch_cuda.so",
        lib_src.to_str().unwrap(),
    ]);
    let rpath = format!("-Wl,-rpath,{}", t.display());
    cc(&[
        "-o",
        "static_nccl",
        prog_src.to_str().unwrap(),
        "-L.",
        "-ltorch_cuda",
        &rpath,
    ]);
    let prog = t.join("static_nccl");

    let bare = run(&mut Command::new(&prog));
    assert!(String::from_utf8_lossy(&bare.stdout).contains("ncclGetVersion absent"));

    let dir = t.join("dumps");
    let out = run(&mut preloaded(&prog, &dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ncclGetVersion rc=3"), "{stdout}");
    let d = single_dump(&dir);
    assert!(d.header.nccl_static, "libtorch_cuda mapped without libnccl");
    let libs = snapshots(&d, BlobKind::Libraries);
    assert_eq!(libs[0]["nccl_static"], true);
    assert!(libs[0]["nccl_paths"].as_array().unwrap().is_empty());
    let note = d
        .records
        .iter()
        .filter(|r| r.call() == Some(CallId::RecorderNote))
        .filter_map(|r| d.blob(r.blob))
        .map(|b| b.text())
        .next()
        .expect("a note");
    assert!(note.contains("ncclGetVersion"), "{note}");
}
