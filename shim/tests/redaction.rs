//! Secrets on the command line and in the environment of a real process under the preloaded
//! shim (issue 22 item 8, issue 36 item 9): the dump it leaves holds none of them, neither in the
//! decoded snapshots nor anywhere in the file's raw bytes, the redacted arguments read as the
//! fixed marker, and ordinary arguments that resemble them (a port after `-p`, python's `-u`)
//! are kept.

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
    // Issue 36 item 9.
    "-pS3CRET-mysql",
    "--passphrase",
    "S3CRET-passphrase",
    "--pass-phrase=S3CRET-pass-phrase",
    "--creds",
    "u:S3CRET-creds",
    "-u",
    "user:S3CRET-curl",
    "--login=admin:S3CRET-login",
    "--header=X-Api-Key:S3CRET-header",
    "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sig=S3CRET-sas&se=2030",
    "https://hooks.slack.com/services/T0/B0/S3CRETslack",
    "https://discord.com/api/webhooks/123/S3CRET-discord",
    "hf_S3CRETabcdefghijklmnopqrstuvwxyzAB",
    "ghp_S3CRETabcdefghijklmnopqrstuvwxyzAB",
    "xoxb-1234-S3CRET-slack-bot",
    "postgres://u:S3CRET-a@S3CRET-b@db/x",
    // Kept: a launcher's port, python's unbuffered flag.
    "-p",
    "29500",
    "-u",
    "train.py",
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
    "-p<redacted>",
    "--passphrase",
    "<redacted>",
    "--pass-phrase=<redacted>",
    "--creds",
    "<redacted>",
    "-u",
    "<redacted>",
    "--login=<redacted>",
    "--header=X-Api-Key:<redacted>",
    "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sig=<redacted>&se=2030",
    "https://hooks.slack.com/<redacted>",
    "https://discord.com/api/webhooks/<redacted>",
    "<redacted>",
    "<redacted>",
    "<redacted>",
    "postgres://u:<redacted>@db/x",
    "-p",
    "29500",
    "-u",
    "train.py",
];

/// Variables `NCCLSHIM_ENV_ALLOW` admits: their secrets too stay out.
const ENV: &[(&str, &str)] = &[
    ("NCCLSHIM_ENV_ALLOW", "MYAPP_,SSHPASS,GH_PAT"),
    ("MYAPP_STORE", "redis://:S3CRET-env-url@cache:6379/0"),
    ("MYAPP_DB_PASS", "S3CRET-env-pass"),
    ("MYAPP_DB_PWD", "S3CRET-env-pwd"),
    ("MYAPP_DSN", "host=db password=S3CRET-env-dsn"),
    ("MYAPP_MODE", "kept-in-the-clear"),
    // Issue 36 item 9.
    ("SSHPASS", "S3CRET-sshpass"),
    ("GH_PAT", "S3CRET-gh-pat"),
    ("MASTER_ADDR", "u:S3CRET-c@S3CRET-d@node1"),
    (
        "MYAPP_HOOK",
        "https://hooks.slack.com/services/T0/B0/S3CRETenvslack",
    ),
    ("MYAPP_HF", "hf_S3CRETabcdefghijklmnopqrstuvwxyzCD"),
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
    for name in [
        "MYAPP_DB_PASS",
        "MYAPP_DB_PWD",
        "MYAPP_DSN",
        "SSHPASS",
        "GH_PAT",
        "MYAPP_HF",
    ] {
        assert_eq!(env[0][name], "<redacted>", "{name}");
    }
    assert_eq!(env[0]["MASTER_ADDR"], "u:<redacted>@node1");
    assert_eq!(env[0]["MYAPP_HOOK"], "https://hooks.slack.com/<redacted>");

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
