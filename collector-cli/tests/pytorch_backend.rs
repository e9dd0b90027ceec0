//! Which PyTorch backend ran, said by the report from what the real shim recorded: a real NCCL
//! job (the PyPI libnccl, `ncclGetUniqueId` failing for real on a bad interface) started with
//! `TORCH_DIST_USE_NCCL2` set, the variable that decides what `backend="nccl"` builds (PyTorch
//! 2.15 makes it the new nccl2 ProcessGroup unless it is 0). The shim keeps the variable in its
//! environment snapshot, and `report` names the backend, in text and JSON; unset, nothing is
//! said (it would depend on the PyTorch release, which the dumps do not hold).

mod support;

use std::path::Path;
use std::process::Command;
use support::native::{nccl_fail_program, shim_so};

fn job(out: &Path, dir: &Path, use_nccl2: Option<&str>) {
    let mut c = Command::new(nccl_fail_program(out));
    c.arg("uniqueid")
        .env("NCCL_SOCKET_IFNAME", "bad0")
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", dir)
        .env_remove("TORCH_DIST_USE_NCCL2");
    if let Some(v) = use_nccl2 {
        c.env("TORCH_DIST_USE_NCCL2", v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{o:?}");
}

fn report(dir: &Path, json: bool) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
    c.arg("report");
    if json {
        c.arg("--json");
    }
    String::from_utf8_lossy(&c.arg(dir).output().unwrap().stdout).into_owned()
}

#[test]
fn torch_dist_use_nccl2_names_the_backend_in_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let legacy = tmp.path().join("legacy");
    job(tmp.path(), &legacy, Some("0"));
    let text = report(&legacy, false);
    assert!(
        text.lines().any(|l| l
            .starts_with("PyTorch backend: nccl: PyTorch's legacy ProcessGroupNCCL")
            && l.contains("TORCH_DIST_USE_NCCL2=0")),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&report(&legacy, true)).unwrap();
    assert_eq!(v["pytorch_backend"][0]["backend"], "nccl");
    assert_eq!(v["pytorch_backend"][0]["known_from"], "environment");

    let nccl2 = tmp.path().join("nccl2");
    job(tmp.path(), &nccl2, Some("1"));
    let v: serde_json::Value = serde_json::from_str(&report(&nccl2, true)).unwrap();
    assert_eq!(v["pytorch_backend"][0]["backend"], "nccl2");

    let unset = tmp.path().join("unset");
    job(tmp.path(), &unset, None);
    let text = report(&unset, false);
    assert!(!text.contains("PyTorch backend"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&report(&unset, true)).unwrap();
    assert!(v.get("pytorch_backend").is_none(), "{v:#}");
}
