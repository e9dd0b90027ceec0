//! One redaction table for everything the recorder copies out of a process that may hold a
//! secret: environment values ([`crate::env`]) and the command line ([`crate::process`]).
//!
//! [`RULES`] is data: each entry says which form of secret it catches and why it is there. The
//! environment and the command line read the same table, so a name that is secret as a variable
//! (`HF_TOKEN`) is secret as an option (`--hf-token X`), as a `KEY=VALUE` argument and as a key
//! in a JSON or dict-like argument (`--config={"hf_token": "X"}`). A redacted value becomes
//! [`REDACTED`] as a whole, never a part of it. Over-redaction costs a report a detail; a leak
//! costs the user a credential (dumps are copied to shared filesystems), so every doubtful case
//! is redacted; the few exceptions (a port after `-p`, `-u` without `user:password`) are rules
//! of the table too.
//!
//! The report reads only what the recorder wrote: redaction happens here, once, before anything
//! reaches a dump, and no reader has a second copy of these rules.
//!
//! The scanners ([`scan`]) walk text by characters and slices only: any input (non-UTF-8 arrives
//! already replaced) gives an answer without panicking (`proptest` below).

mod rules;
mod scan;

use rules::{attached_secret_flag, is_name, secret_option};
pub use rules::{is_secret_name, Form, Rule, SecretValue, TokenChars, REDACTED, RULES};

/// An environment value: all of it when the name is secret, else its embedded secrets.
pub fn redact_env_value(name: &str, value: &str) -> String {
    if is_secret_name(name) {
        REDACTED.to_owned()
    } else {
        redact_text(value)
    }
}

/// The command line with secrets replaced by [`REDACTED`]:
/// - a secret option's value: `--hf-token=X`, `--password X`, `-p X`, `-pX`, `-u user:pass`
///   (the next argument, unless it is itself a long option `--x`: a flag that only looks secret
///   costs its neighbour, never a secret), when the option's rule says that value is secret;
/// - any other option's `=value`, read as an argument of its own (`--header=X-Api-Key:X`);
/// - in every argument, argument 0 included, what [`redact_text`] finds.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut pending: Option<SecretValue> = None;
    for (i, arg) in args.iter().enumerate() {
        if let Some(value) = pending.take() {
            if !arg.starts_with("--") && value.covers(arg) {
                out.push(REDACTED.to_owned());
                continue;
            }
        }
        if i > 0 && arg.starts_with('-') {
            // Before splitting at `=`: mysql's `-pse=cret` is a password with an `=` in it.
            if let Some(flag) = attached_secret_flag(arg) {
                out.push(format!("{flag}{REDACTED}"));
                continue;
            }
            match arg.split_once('=') {
                Some((flag, value)) if is_name(flag) => {
                    if secret_option(flag).is_some_and(|v| v.covers(value)) {
                        out.push(format!("{flag}={REDACTED}"));
                    } else {
                        out.push(format!("{flag}={}", redact_text(value)));
                    }
                    continue;
                }
                None => {
                    if let Some(value) = secret_option(arg) {
                        pending = Some(value);
                        out.push(arg.clone());
                        continue;
                    }
                }
                Some(_) => {}
            }
        }
        out.push(redact_text(arg));
    }
    out
}

/// Secrets inside one argument or value: webhook URLs, URL user info, bare tokens, `user:pass@host`,
/// a leading secret key, embedded secret keys and authentication schemes.
pub fn redact_text(text: &str) -> String {
    let text = scan::redact_secret_url_paths(text);
    let text = scan::redact_url_userinfo(&text);
    let text = scan::redact_tokens(&text);
    let text = scan::redact_schemeless_userinfo(&text);
    if let Some(kept) = scan::leading_key(&text) {
        return format!("{kept}{REDACTED}");
    }
    let text = scan::redact_embedded_keys(&text);
    scan::redact_auth_schemes(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every secret form of issue 22 (and the older ones), as a whole command line:
    /// (argv, what is recorded).
    const ARGV_CASES: &[(&[&str], &[&str])] = &[
        (&["x", "-p", "hunter2"], &["x", "-p", "<redacted>"]),
        (&["x", "-p=hunter2"], &["x", "-p=<redacted>"]),
        (&["x", "--pass", "hunter2"], &["x", "--pass", "<redacted>"]),
        (&["x", "--pwd", "hunter2"], &["x", "--pwd", "<redacted>"]),
        (&["x", "--pw=hunter2"], &["x", "--pw=<redacted>"]),
        (
            &["x", "--password", "hunter2"],
            &["x", "--password", "<redacted>"],
        ),
        (
            &["x", "--db-pass", "hunter2"],
            &["x", "--db-pass", "<redacted>"],
        ),
        (
            &["x", "--dsn", "postgres://u:pw@h/db"],
            &["x", "--dsn", "<redacted>"],
        ),
        (&["x", "--token", "t0k"], &["x", "--token", "<redacted>"]),
        (&["x", "--api-key=k1"], &["x", "--api-key=<redacted>"]),
        (&["x", "--hf-token=hf_abc"], &["x", "--hf-token=<redacted>"]),
        (&["x", "-api-key=k1"], &["x", "-api-key=<redacted>"]),
        (
            &["curl", "-H", "Authorization: Bearer s3cr3t"],
            &["curl", "-H", "Authorization: <redacted>"],
        ),
        (
            &["curl", "-H", "authorization:Basic dXNlcjpwdw=="],
            &["curl", "-H", "authorization:<redacted>"],
        ),
        (
            &["curl", "--header=X-Api-Key: k3y"],
            &["curl", "--header=X-Api-Key: <redacted>"],
        ),
        (
            &["curl", "-H", "X-Custom: Bearer s3cr3t"],
            &["curl", "-H", "X-Custom: Bearer <redacted>"],
        ),
        (
            &["x", "--config={\"hf_token\":\"s3cr3t\",\"lr\":0.1}"],
            &["x", "--config={\"hf_token\":\"<redacted>\",\"lr\":0.1}"],
        ),
        (
            &["x", "--config", "{'api_key': 'k', 'password': 12345}"],
            &[
                "x",
                "--config",
                "{'api_key': '<redacted>', 'password': <redacted>}",
            ],
        ),
        (
            &["x", "--opts", "lr=0.1,hf_token=s3cr3t,bs=8"],
            &["x", "--opts", "lr=0.1,hf_token=<redacted>,bs=8"],
        ),
        (
            &["x", "Server=db;Uid=u;Pwd=s3cr3t;"],
            &["x", "Server=db;Uid=u;Pwd=<redacted>;"],
        ),
        (
            &["x", "https://h.org/f?token=s3cr3t&x=1"],
            &["x", "https://h.org/f?token=<redacted>&x=1"],
        ),
        (
            &["x", "https://s3cr3t@github.com/o/r"],
            &["x", "https://<redacted>@github.com/o/r"],
        ),
        (
            &["x", "--data", "s3://user:pw@bucket/path"],
            &["x", "--data", "s3://user:<redacted>@bucket/path"],
        ),
        (
            &["x", "https://user:pa/ss@host/p"],
            &["x", "https://user:<redacted>@host/p"],
        ),
        (
            &["x", "WANDB_API_KEY=w1"],
            &["x", "WANDB_API_KEY=<redacted>"],
        ),
        (&["https://u:pw@h/x"], &["https://u:<redacted>@h/x"]),
        // Issue 36 item 9.
        (&["mysql", "-phunter2"], &["mysql", "-p<redacted>"]),
        (&["mysql", "-pse=cret"], &["mysql", "-p<redacted>"]),
        (
            &["x", "--passphrase", "s3cr3t"],
            &["x", "--passphrase", "<redacted>"],
        ),
        (
            &["x", "--pass-phrase=s3cr3t"],
            &["x", "--pass-phrase=<redacted>"],
        ),
        (
            &["x", "--creds", "u:s3cr3t"],
            &["x", "--creds", "<redacted>"],
        ),
        (
            &["curl", "-u", "user:s3cr3t"],
            &["curl", "-u", "<redacted>"],
        ),
        (&["curl", "-uuser:s3cr3t"], &["curl", "-u<redacted>"]),
        (
            &["curl", "--user", "user:s3cr3t"],
            &["curl", "--user", "<redacted>"],
        ),
        (
            &["curl", "--user=user:s3cr3t"],
            &["curl", "--user=<redacted>"],
        ),
        (&["x", "--login=admin:s3cr3t"], &["x", "--login=<redacted>"]),
        (
            &["curl", "--header=X-Api-Key:s3cr3t"],
            &["curl", "--header=X-Api-Key:<redacted>"],
        ),
        (
            &[
                "x",
                "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=ab%2Bc%3D&se=2030",
            ],
            &[
                "x",
                "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=<redacted>&se=2030",
            ],
        ),
        (
            &[
                "x",
                "--notify=https://hooks.slack.com/services/T0/B0/s3cr3t",
            ],
            &["x", "--notify=https://hooks.slack.com/<redacted>"],
        ),
        (
            &["x", "https://discord.com/api/webhooks/123/s3cr3t"],
            &["x", "https://discord.com/api/webhooks/<redacted>"],
        ),
        (
            &["x", "https://ptb.discordapp.com/api/webhooks/123/s3cr3t"],
            &["x", "https://ptb.discordapp.com/api/webhooks/<redacted>"],
        ),
        (
            &["x", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"],
            &["x", "<redacted>"],
        ),
        (
            &["x", "--push-to=ghp_0123456789abcdefghijABCDEFGHIJ012345"],
            &["x", "--push-to=<redacted>"],
        ),
        (
            &[
                "x",
                "repo=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
            ],
            &["x", "repo=<redacted>"],
        ),
        (
            &["x", "gho_0123456789abcdefghijABCDEFGHIJ012345"],
            &["x", "<redacted>"],
        ),
        (&["x", "xoxb-1234-5678-AbCdEf"], &["x", "<redacted>"]),
        (&["x", "xoxp-1234-5678-AbCdEf"], &["x", "<redacted>"]),
        (
            &["x", "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"],
            &["x", "<redacted>"],
        ),
        (
            &["x", "--db", "postgres://u:se@cret@h/db"],
            &["x", "--db", "postgres://u:<redacted>@h/db"],
        ),
        (
            &["x", "https://u:pw@h/pkg@v2"],
            &["x", "https://u:<redacted>@h/pkg@v2"],
        ),
        (
            &["x", "--rdzv=u:pa@ss@10.0.0.1:29500"],
            &["x", "--rdzv=u:<redacted>@10.0.0.1:29500"],
        ),
        // Kept (issue 36): a port after -p, -u without user:password, look-alikes.
        (&["torchrun", "-p", "29500"], &["torchrun", "-p", "29500"]),
        (&["x", "-p29500"], &["x", "-p29500"]),
        (&["x", "-p=29500"], &["x", "-p=29500"]),
        (&["python", "-u", "train.py"], &["python", "-u", "train.py"]),
        (&["x", "-u", "bob"], &["x", "-u", "bob"]),
        (&["x", "--login", "admin"], &["x", "--login", "admin"]),
        (&["x", "--user=bob"], &["x", "--user=bob"]),
        (
            &["x", "-u", "https://h.org:8080/x"],
            &["x", "-u", "https://h.org:8080/x"],
        ),
        (
            &["x", "--hf-transfer", "hf_transfer", "--sig-figs", "3"],
            &["x", "--hf-transfer", "hf_transfer", "--sig-figs", "3"],
        ),
        (
            &["x", "--run-name=task-sk-resnet50"],
            &["x", "--run-name=task-sk-resnet50"],
        ),
        (
            &["x", "img:tag@sha256:0123abcd", "git@github.com:o/r.git"],
            &["x", "img:tag@sha256:0123abcd", "git@github.com:o/r.git"],
        ),
        (
            &["x", "https://hooks.slack.com/"],
            &["x", "https://hooks.slack.com/"],
        ),
        // Kept: not secrets.
        (
            &["python3", "train.py", "--lr", "0.1", "--epochs=3"],
            &["python3", "train.py", "--lr", "0.1", "--epochs=3"],
        ),
        (
            &["x", "--master=tcp://10.0.0.1:29500"],
            &["x", "--master=tcp://10.0.0.1:29500"],
        ),
        (
            &["x", "https://plain.org/a@b"],
            &["x", "https://plain.org/a@b"],
        ),
        (
            &["x", "https://h:8080/pkg@1.0"],
            &["x", "https://h:8080/pkg@1.0"],
        ),
        (&["x", "NCCL_IB_PKEY=0x8001"], &["x", "NCCL_IB_PKEY=0x8001"]),
        (
            &["x", "--tokenizer", "gpt2", "--max-tokens=5"],
            &["x", "--tokenizer", "gpt2", "--max-tokens=5"],
        ),
        (&["x", "--bypass", "y"], &["x", "--bypass", "y"]),
        // A flag that only looks secret costs its neighbour, never a long option.
        (
            &["x", "--secret-file", "--epochs=3"],
            &["x", "--secret-file", "--epochs=3"],
        ),
        (&["--token-tool", "--token"], &["--token-tool", "--token"]),
    ];

    #[test]
    fn every_argv_form_is_redacted_whole() {
        for (argv, want) in ARGV_CASES {
            let args: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
            assert_eq!(redact_args(&args), *want, "{argv:?}");
        }
    }

    /// (name, value, what is recorded): the same table read for the environment.
    const ENV_CASES: &[(&str, &str, &str)] = &[
        ("NCCL_API_TOKEN", "abc", REDACTED),
        ("SLURM_JOB_KEY", "k", REDACTED),
        ("MASTER_PASSWORD", "p", REDACTED),
        ("TORCH_AUTH_HEADER", "h", REDACTED),
        ("MY_DB_PASS", "p", REDACTED),
        ("MY_DB_PWD", "p", REDACTED),
        ("MY_DB_DSN", "postgres://u:p@h/db", REDACTED),
        (
            "MY_URL",
            "postgres://u:s3cr3t@h/db",
            "postgres://u:<redacted>@h/db",
        ),
        (
            "MY_REPO",
            "https://ghp_x@github.com/o/r",
            "https://<redacted>@github.com/o/r",
        ),
        (
            "MY_HDR",
            "Authorization: Bearer x",
            "Authorization: <redacted>",
        ),
        (
            "MY_CFG",
            "{\"hf_token\": \"x\"}",
            "{\"hf_token\": \"<redacted>\"}",
        ),
        ("NCCL_IB_PKEY", "0x8001", "0x8001"),
        ("NCCL_SOCKET_IFNAME", "eth0", "eth0"),
        ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1", "=mlx5_0:1,mlx5_1:1"),
        (
            "LD_LIBRARY_PATH",
            "/opt/keyutils:/usr/lib",
            "/opt/keyutils:/usr/lib",
        ),
        ("MASTER_ADDR", "10.0.0.1", "10.0.0.1"),
        ("PWD_HINT", "x", "x"),
        // Issue 36 item 9.
        ("SSHPASS", "s3cr3t", REDACTED),
        ("GH_PAT", "github_pat_x", REDACTED),
        ("MY_PASSPHRASE", "s", REDACTED),
        ("MASTER_ADDR", "u:s3cr3t@node1", "u:<redacted>@node1"),
        (
            "MASTER_ADDR",
            "u:s3@cr3t@10.0.0.1:29500",
            "u:<redacted>@10.0.0.1:29500",
        ),
        (
            "MY_DB",
            "postgres://u:se@cret@h/db",
            "postgres://u:<redacted>@h/db",
        ),
        (
            "MY_HOOK",
            "https://hooks.slack.com/services/T0/B0/s3cr3t",
            "https://hooks.slack.com/<redacted>",
        ),
        (
            "MY_MODEL",
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
            REDACTED,
        ),
        (
            "MY_SAS",
            "sv=2022&sig=ab%2Bc&se=1",
            "sv=2022&sig=<redacted>&se=1",
        ),
        ("MASTER_PORT", "29500", "29500"),
        ("PET_RDZV_ENDPOINT", "node1:29500", "node1:29500"),
    ];

    #[test]
    fn every_env_form_is_redacted_whole() {
        for (name, value, want) in ENV_CASES {
            assert_eq!(redact_env_value(name, value), *want, "{name}={value}");
        }
    }

    #[test]
    fn every_rule_says_why() {
        for r in RULES {
            assert!(r.why.len() > 8, "{:?}", r.form);
        }
    }

    proptest::proptest! {
        /// Any text: no panic, and a secret in any of these forms never survives.
        #[test]
        fn any_text_is_handled(text in "\\PC{0,60}", secret in "[A-Za-z0-9]{6,12}") {
            let _ = redact_text(&text);
            let _ = redact_args(&[text.clone(), text.clone(), "-p".into()]);
            let args = vec![
                text.clone(),
                format!("--password={secret}"),
                format!("{{\"token\": \"{secret}\"}}"),
                format!("-p{secret}"),
                "-u".into(),
                format!("u:{secret}"),
                format!("postgres://u:{secret}@{secret}@h/db"),
                format!("--rdzv=u:{secret}@node1:29500"),
            ];
            let out = redact_args(&args);
            for (arg, got) in args.iter().zip(&out).skip(1) {
                proptest::prop_assert!(!got.contains(&secret), "{arg} -> {got}");
            }
            let value = redact_env_value("MASTER_ADDR", &format!("u:{secret}@{secret}@h"));
            proptest::prop_assert!(!value.contains(&secret));
        }
    }
}
