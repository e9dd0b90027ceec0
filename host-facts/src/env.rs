//! The environment a diagnosis needs (NCCL, CUDA, launcher and rank variables), filtered by
//! prefix so unrelated variables never leave the process, with secrets redacted by the one
//! table in [`crate::redact`] even when a prefix admits them (`NCCL_..._TOKEN`,
//! `SLURM_JOB_KEY`, a URL password in a variable `NCCLSHIM_ENV_ALLOW` added...).

use crate::redact::redact_env_value;
pub use crate::redact::{is_secret_name, redact_args, REDACTED};
use std::collections::BTreeMap;

/// Variables whose name starts with one of these are kept.
const PREFIXES: &[&str] = &[
    "NCCL_",
    "CUDA_",
    // PyTorch's own (TORCH_DIST_USE_NCCL2 picks the `nccl` backend's implementation), and
    // torchcomms' (TORCHCOMM_FR_* its Flight Recorder), which "TORCH_" does not cover.
    "TORCH_",
    // PyTorch's nccl2 backend reads TORCHCOMM_NCCL_BOOTSTRAP_UNIQUEID_EXCHANGE_METHOD (torchcomms'
    // name; diagnose/knowledge/messages.toml, pytorch-nccl2-no-id-exchange).
    "TORCHCOMM_",
    "FI_",
    "MASTER_",
    "SLURM_",
    "OMPI_",
    "PMI",
    "NCCLSHIM_",
    "NVIDIA_",
    "UCX_",
    // Launchers (diagnose/knowledge/launchers.toml; its tests check every variable is kept).
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

/// The filtered, redacted environment, sorted by name.
pub type Environment = BTreeMap<String, String>;

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
            let v = redact_env_value(&k, &v);
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

    /// Which PyTorch backend ran (`TORCH_DIST_USE_NCCL2`) and torchcomms' settings are kept;
    /// a secret-looking torchcomms variable is still redacted.
    #[test]
    fn the_backend_choice_and_torchcomms_settings_are_kept() {
        let env = filter(v(&[
            ("TORCH_DIST_USE_NCCL2", "0"),
            ("TORCHCOMM_FR_DUMP_TEMP_FILE", "/d/fr/torchcomms_rank_"),
            ("TORCHCOMM_FR_BUFFER_SIZE", "2000"),
            ("TORCHCOMM_STORE_TOKEN", "s3cret"),
            ("TORCHX_OTHER", "x"),
        ]));
        assert_eq!(env["TORCH_DIST_USE_NCCL2"], "0");
        assert_eq!(env["TORCHCOMM_FR_DUMP_TEMP_FILE"], "/d/fr/torchcomms_rank_");
        assert_eq!(env["TORCHCOMM_FR_BUFFER_SIZE"], "2000");
        assert_eq!(env["TORCHCOMM_STORE_TOKEN"], REDACTED);
        assert!(!env.contains_key("TORCHX_OTHER"));
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

    /// Issue 22 item 8: variables admitted by `NCCLSHIM_ENV_ALLOW` leaked URL passwords and
    /// `*_PASS`, `*_PWD`, `*_DSN` values.
    #[test]
    fn allowed_variables_are_redacted_by_the_same_table() {
        let env = filter(v(&[
            ("NCCLSHIM_ENV_ALLOW", "MY_"),
            ("MY_DB_PASS", "hunter2"),
            ("MY_DB_PWD", "hunter2"),
            ("MY_DB_DSN", "dbname=x password=hunter2"),
            ("MY_STORE", "redis://:hunter2@cache:6379/0"),
            ("MY_SETTING", "1"),
        ]));
        assert_eq!(env["MY_DB_PASS"], REDACTED);
        assert_eq!(env["MY_DB_PWD"], REDACTED);
        assert_eq!(env["MY_DB_DSN"], REDACTED);
        assert_eq!(env["MY_STORE"], "redis://:<redacted>@cache:6379/0");
        assert_eq!(env["MY_SETTING"], "1");
    }
}
