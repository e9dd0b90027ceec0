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
];

/// Variables kept by exact name.
const EXACT: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
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
}
