//! `ncclshim doctor` on this very host: the checks run on real host facts (collected by the same
//! code the shim uses), every check is listed with its result, and the exit code says whether a
//! job started here would fail (1) or not (0). Without an NVIDIA driver (CI, this build machine)
//! every job fails, so doctor exits 1 with exactly that error; with one, it exits 0.

mod support;

use std::process::Command;

fn has_driver() -> bool {
    std::path::Path::new("/proc/driver/nvidia/version").exists()
}

fn doctor_json(env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
    c.args(["doctor", "--json"])
        .env_remove("NCCL_SOCKET_IFNAME")
        .env_remove("NCCL_NET");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    support::schema::check_doctor(&v);
    (out.status.code().unwrap(), v)
}

fn errors(v: &serde_json::Value) -> Vec<String> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "error")
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_impossible_socket_interface_is_an_error_on_any_host() {
    let (code, v) = doctor_json(&[("NCCL_SOCKET_IFNAME", "=no-such-interface-on-any-host0")]);
    assert_eq!(code, 1);
    assert_eq!(v["job_would_fail"], true);
    let checks = v["checks"].as_array().unwrap();
    let c = checks
        .iter()
        .find(|c| c["id"] == "socket-ifname")
        .expect("C08 check");
    assert_eq!(c["status"], "error");
    assert_eq!(c["catalog"], "C08");
    assert_eq!(
        c["values"]["NCCL_SOCKET_IFNAME"],
        "=no-such-interface-on-any-host0"
    );
    // The facts it judged are in the output too: the interfaces really present here.
    assert!(!v["facts"]["host"]["netifs"].as_array().unwrap().is_empty());
}

#[test]
fn every_check_is_listed_and_the_exit_code_follows_the_driver_here() {
    let (code, v) = doctor_json(&[]);
    assert_eq!(v["format_version"], 1);
    assert!(v["tool_version"].is_string());
    let checks = v["checks"].as_array().unwrap();
    for c in checks {
        assert!(c["id"].is_string() && c["message"].is_string(), "{c}");
        assert!(c["values"].is_object(), "{c}");
        assert!(
            ["ok", "info", "warn", "error"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
    }
    for id in [
        "nvidia-driver",
        "nccl-installed",
        "dev-shm",
        "socket-ifname",
    ] {
        assert!(checks.iter().any(|c| c["id"] == id), "{id} listed");
    }
    assert!(
        checks.iter().any(|c| c["status"] == "ok"),
        "passing checks are shown"
    );
    if has_driver() {
        assert_eq!(code, 0, "{v:#}");
        assert!(errors(&v).is_empty(), "{v:#}");
    } else {
        assert_eq!(code, 1, "no NVIDIA driver: every job would fail");
        assert_eq!(errors(&v), vec!["nvidia-driver"]);
        assert_eq!(v["job_would_fail"], true);
    }

    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["doctor", "--color", "never"])
        .env_remove("NCCL_SOCKET_IFNAME")
        .env_remove("NCCL_NET")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(code), "{text}");
    assert!(text.contains("[   ok] socket-ifname:"), "{text}");
    let verdict = text.lines().last().unwrap();
    assert!(
        verdict.starts_with(&format!("{} checks: ", checks.len())),
        "{text}"
    );
    if !has_driver() {
        assert!(
            text.contains("[ERROR] nvidia-driver: no NVIDIA driver"),
            "{text}"
        );
        assert!(
            verdict.ends_with("a job started on this host would fail"),
            "{text}"
        );
    }
}
