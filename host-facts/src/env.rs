//! The environment a diagnosis needs (NCCL, CUDA, launcher and rank variables), filtered by
//! prefix so unrelated variables never leave the process, with secret-looking names redacted
//! even when a prefix admits them (`NCCL_..._TOKEN`, `SLURM_JOB_KEY`...).

use std::collections::BTreeMap;

/// What a redacted value reads as.
pub const REDACTED: &str = "<redacted>";

/// Variables whose name starts with one of these are kept.
const PREFIXES: &[&str] = &[
    "NCCL_",
    "CUDA_",
    "TORCH_",
    "FI_",
    "MASTER_",
    "SLURM_",
    "OMPI_",
    "PMI",
    "NCCLSHIM_",
    "NVIDIA_",
    "UCX_",
    // Launchers (collector-cli/knowledge/launchers.toml; its tests check every variable is kept).
    "TORCHELASTIC_",
    "HOROVOD_",
    "MV2_COMM_WORLD_",
    "MPI_LOCAL",
    "PET_",
];

/// Variables kept by exact name.
const EXACT: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "NODE_RANK",
    "JOB_COMPLETION_INDEX",
    "HYDI_CONTROL_FD",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
];

/// Name fragments that mark a value as a secret.
const SECRET_MARKERS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "PRIVATE",
    "SESSION",
    "SIGNATURE",
    "CERT",
];

/// Names that contain a marker but are known not to be secrets and matter for diagnosis.
const NOT_SECRET: &[&str] = &["NCCL_IB_PKEY"];

/// The filtered, redacted environment, sorted by name.
pub type Environment = BTreeMap<String, String>;

/// Whether a variable name looks like it holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !NOT_SECRET.contains(&upper.as_str()) && SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// The command line with secret-looking values replaced by [`REDACTED`], by the same name rules
/// as the environment ([`is_secret_name`], `-` read as `_`):
/// - `--hf-token=VALUE`, `-password=VALUE`: the value after `=`;
/// - `--password VALUE`: the next argument, unless it is itself a long option (`--x`); a flag
///   that only looks secret (`--use-auth train.py`) costs its neighbour, never a secret;
/// - `API_KEY=VALUE` (an identifier-like name before `=`): the value;
/// - `scheme://user:password@host` anywhere in an argument: the password.
///
/// Argument 0 (the program) is only checked for a URL password.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut redact_next = false;
    for (i, arg) in args.iter().enumerate() {
        if std::mem::take(&mut redact_next) && !arg.starts_with("--") {
            out.push(REDACTED.to_owned());
            continue;
        }
        let arg = redact_url_password(arg);
        if i == 0 {
            out.push(arg);
            continue;
        }
        let flag = arg.trim_start_matches('-');
        let dashed = flag.len() < arg.len();
        match flag.split_once('=') {
            Some((name, _)) if (dashed || is_identifier(name)) && is_secret_arg_name(name) => {
                out.push(format!(
                    "{}={REDACTED}",
                    &arg[..arg.len() - flag.len() + name.len()]
                ));
            }
            None if dashed && is_secret_arg_name(flag) => {
                redact_next = true;
                out.push(arg);
            }
            _ => out.push(arg),
        }
    }
    out
}

/// A command-line option or `KEY=VALUE` name read as a variable name.
fn is_secret_arg_name(name: &str) -> bool {
    !name.is_empty() && is_secret_name(&name.replace(['-', '.'], "_"))
}

fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// `scheme://user:password@host...` with the password redacted (every URL in `arg`).
fn redact_url_password(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the first '/', '?', '#' or whitespace.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority
            .rfind('@')
            .and_then(|a| authority[..a].find(':').map(|c| (c, a)))
        {
            Some((colon, at)) => {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Whether the recorder keeps a variable of this name (without `NCCLSHIM_ENV_ALLOW` additions).
pub fn is_kept_name(name: &str) -> bool {
    is_kept(name, &[])
}

fn is_kept(name: &str, extra_prefixes: &[String]) -> bool {
    EXACT.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
        || extra_prefixes
            .iter()
            .any(|p| !p.is_empty() && name.starts_with(p.as_str()))
}

/// Filters `vars` (name, value pairs). `NCCLSHIM_ENV_ALLOW`, a comma list of extra name
/// prefixes, is honoured when it is among `vars`.
pub fn filter<I>(vars: I) -> Environment
where
    I: IntoIterator<Item = (String, String)>,
{
    let all: Vec<(String, String)> = vars.into_iter().collect();
    let extra: Vec<String> = all
        .iter()
        .find(|(k, _)| k == "NCCLSHIM_ENV_ALLOW")
        .map(|(_, v)| v.split(',').map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default();
    all.into_iter()
        .filter(|(k, _)| is_kept(k, &extra))
        .map(|(k, v)| {
            let v = if is_secret_name(&k) {
                REDACTED.to_owned()
            } else {
                v
            };
            (k, v)
        })
        .collect()
}

/// The current process's filtered environment (non-UTF-8 bytes are replaced, not dropped).
pub fn environment() -> Environment {
    filter(std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn keeps_only_relevant_names() {
        let env = filter(v(&[
            ("NCCL_DEBUG", "INFO"),
            ("HOME", "/root"),
            ("LOCAL_RANK", "3"),
            ("RANKS", "x"),
            ("PMIX_RANK", "1"),
            ("LD_PRELOAD", "/x/libncclshim.so"),
            ("PATH", "/bin"),
        ]));
        let names: Vec<_> = env.keys().cloned().collect();
        assert_eq!(
            names,
            ["LD_PRELOAD", "LOCAL_RANK", "NCCL_DEBUG", "PMIX_RANK"]
        );
    }

    #[test]
    fn redacts_secret_looking_names_even_under_kept_prefixes() {
        let env = filter(v(&[
            ("NCCL_API_TOKEN", "abc"),
            ("SLURM_JOB_KEY", "k"),
            ("MASTER_PASSWORD", "p"),
            ("TORCH_AUTH_HEADER", "h"),
            ("NCCL_IB_PKEY", "0x8001"),
            ("NCCL_SOCKET_IFNAME", "eth0"),
        ]));
        assert_eq!(env["NCCL_API_TOKEN"], REDACTED);
        assert_eq!(env["SLURM_JOB_KEY"], REDACTED);
        assert_eq!(env["MASTER_PASSWORD"], REDACTED);
        assert_eq!(env["TORCH_AUTH_HEADER"], REDACTED);
        assert_eq!(env["NCCL_IB_PKEY"], "0x8001");
        assert_eq!(env["NCCL_SOCKET_IFNAME"], "eth0");
    }

    #[test]
    fn allow_list_additions_apply() {
        let env = filter(v(&[
            ("NCCLSHIM_ENV_ALLOW", "MY_,JOB"),
            ("MY_SETTING", "1"),
            ("JOBID", "7"),
            ("OTHER", "x"),
        ]));
        assert!(env.contains_key("MY_SETTING"));
        assert!(env.contains_key("JOBID"));
        assert!(!env.contains_key("OTHER"));
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_line_secrets_are_redacted() {
        let got = redact_args(&args(&[
            "python3",
            "train.py",
            "--hf-token=hf_abc",
            "--password",
            "hunter2",
            "-api-key=k1",
            "WANDB_API_KEY=w1",
            "--lr",
            "0.1",
            "--data",
            "s3://user:pw@bucket/path",
            "--master=tcp://10.0.0.1:29500",
            "-p",
            "8080",
            "--secret-file",
            "--epochs=3",
            "NCCL_IB_PKEY=0x8001",
        ]));
        assert_eq!(
            got,
            args(&[
                "python3",
                "train.py",
                "--hf-token=<redacted>",
                "--password",
                "<redacted>",
                "-api-key=<redacted>",
                "WANDB_API_KEY=<redacted>",
                "--lr",
                "0.1",
                "--data",
                "s3://user:<redacted>@bucket/path",
                "--master=tcp://10.0.0.1:29500",
                "-p",
                "8080",
                "--secret-file",
                "--epochs=3",
                "NCCL_IB_PKEY=0x8001",
            ])
        );
    }

    #[test]
    fn urls_keep_everything_but_the_password() {
        assert_eq!(
            redact_url_password("git+https://bob:tok@example.com:443/x?y=1 https://plain.org/a@b"),
            "git+https://bob:<redacted>@example.com:443/x?y=1 https://plain.org/a@b"
        );
        assert_eq!(
            redact_url_password("https://bob@host/"),
            "https://bob@host/"
        );
        assert_eq!(redact_url_password("no url"), "no url");
        // The program itself is kept, a trailing secret flag has nothing to redact.
        assert_eq!(
            redact_args(&args(&["--token-tool", "--token"])),
            args(&["--token-tool", "--token"])
        );
    }
}
