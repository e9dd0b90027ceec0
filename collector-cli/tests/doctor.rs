//! `ncclshim doctor` on this very host: the checks run on real host facts (collected by the same
//! code the shim uses) and a setting that cannot work here is an error with exit code 1.

use std::process::Command;

#[test]
fn an_impossible_socket_interface_is_an_error_on_any_host() {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["doctor", "--json"])
        .env("NCCL_SOCKET_IFNAME", "=no-such-interface-on-any-host0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let c = checks
        .iter()
        .find(|c| c["id"] == "socket-ifname-no-match")
        .expect("C08 check");
    assert_eq!(c["status"], "error");
    assert_eq!(c["catalog"], "C08");
    // The facts it judged are in the output too: the interfaces really present here.
    assert!(!v["facts"]["host"]["netifs"].as_array().unwrap().is_empty());
}

#[test]
fn without_bad_settings_there_is_no_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["doctor", "--color", "never"])
        .env_remove("NCCL_SOCKET_IFNAME")
        .env_remove("NCCL_NET")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("[ERROR]"), "{text}");
    assert!(
        text.contains("nvidia-driver") || text.contains("NVIDIA driver"),
        "{text}"
    );
}
