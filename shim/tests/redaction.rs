//! Secrets on the command line and in the environment of a real process under the preloaded
//! shim (issue 22 item 8): the dump it leaves holds none of them, neither in the decoded
//! snapshots nor anywhere in the file's raw bytes, and the redacted arguments read as the
//! fixed marker.

mod common;

use common::*;
use ncclshim_dump::BlobKind;

/// Each secret is unique, so a hit in the raw bytes names the form that leaked.
const ARGV: &[&str] = &[
    "-p",
    "S3CRET-short-p",
    "--pass",
    "S3CRET-pass",
    "--pwd",
    "S3CRET-pwd",
    "-H",
    "Authorization: Bearer S3CRET-bearer",
    "--config={\"hf_token\":\"S3CRET-json\"}",
    "https://S3CRET-url-user@example.com/repo",
    "https://user:S3CRET-url-pw@example.com/repo",
];

/// What the snapshot's command line must read after the program and `version`.
const RECORDED: &[&str] = &[
    "-p",
    "<redacted>",
    "--pass",
    "<redacted>",
    "--pwd",
    "<redacted>",
    "-H",
    "Authorization: <redacted>",
    "--config={\"hf_token\":\"<redacted>\"}",
    "https://<redacted>@example.com/repo",
    "https://user:<redacted>@example.com/repo",
];

/// Variables `NCCLSHIM_ENV_ALLOW` admits: their secrets too stay out.
const ENV: &[(&str, &str)] = &[
    ("NCCLSHIM_ENV_ALLOW", "MYAPP_"),
    ("MYAPP_STORE", "redis://:S3CRET-env-url@cache:6379/0"),
    ("MYAPP_DB_PASS", "S3CRET-env-pass"),
    ("MYAPP_DB_PWD", "S3CRET-env-pwd"),
    ("MYAPP_DSN", "host=db password=S3CRET-env-dsn"),
    ("MYAPP_MODE", "kept-in-the-clear"),
];

#[test]
fn no_secret_reaches_the_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let dir = tmp.path().join("dumps");
    let mut cmd = preloaded(&prog, &dir);
    cmd.arg("version").args(ARGV).envs(ENV.iter().copied());
    let out = run(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ncclGetVersion rc=0"));

    let d = single_dump(&dir);
    let proc_ = snapshots(&d, BlobKind::Process);
    let cmdline: Vec<&str> = proc_[0]["cmdline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&cmdline[2..], RECORDED);

    let env = snapshots(&d, BlobKind::Environment);
    assert_eq!(
        env[0]["MYAPP_MODE"], "kept-in-the-clear",
        "the allow list works"
    );
    assert_eq!(env[0]["MYAPP_STORE"], "redis://:<redacted>@cache:6379/0");
    for name in ["MYAPP_DB_PASS", "MYAPP_DB_PWD", "MYAPP_DSN"] {
        assert_eq!(env[0][name], "<redacted>", "{name}");
    }

    // The raw file: no secret in any blob, snapshot or stray copy.
    let raw = std::fs::read(dump_files(&dir).pop().unwrap()).unwrap();
    let found = |needle: &str| raw.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        found("kept-in-the-clear"),
        "the raw search finds what is there"
    );
    let leaked: Vec<&str> = ARGV
        .iter()
        .chain(ENV.iter().map(|(_, v)| v))
        .filter_map(|s| s.find("S3CRET").map(|at| &s[at..]))
        .map(|s| s.split(['"', '@', ' ']).next().unwrap())
        .filter(|secret| found(secret))
        .collect();
    assert!(leaked.is_empty(), "secrets in the dump's bytes: {leaked:?}");
    assert!(!found("S3CRET"), "no secret fragment at all");
}
