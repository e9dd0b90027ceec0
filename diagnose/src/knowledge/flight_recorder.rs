//! PyTorch's Flight Recorder settings (`knowledge/flight-recorder.toml`): the environment
//! variables that turn it on and name its dump files, each under every name a PyTorch release
//! reads, newest first. `ncclshim run` sets them so that one command leaves both the shim's
//! dumps and PyTorch's own record of its collectives; the names live in the data file, with
//! their source in PyTorch, not in code.

use serde::Deserialize;
use std::sync::OnceLock;

/// One setting under all its names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    pub id: String,
    pub what: String,
    /// Newest first: PyTorch takes the first one set.
    pub names: Vec<String>,
    /// What `run` sets; `{fr_dir}` stands for the Flight Recorder's folder of the dump directory.
    pub value: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    setting: Vec<Setting>,
}

pub fn settings() -> &'static [Setting] {
    static F: OnceLock<SettingsFile> = OnceLock::new();
    &F.get_or_init(|| {
        super::parse(
            "flight-recorder.toml",
            include_str!("../../knowledge/flight-recorder.toml"),
        )
    })
    .setting
}

/// The placeholder of [`Setting::value`] for the Flight Recorder's folder.
pub const FR_DIR_PLACEHOLDER: &str = "{fr_dir}";

impl Setting {
    /// Whether `value` needs the Flight Recorder's folder to exist.
    pub fn names_a_path(&self) -> bool {
        self.value.contains(FR_DIR_PLACEHOLDER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_a_new_and_an_old_name_and_a_source() {
        let s = settings();
        assert_eq!(s.len(), 3, "{s:?}");
        for x in s {
            assert!(x.names.len() >= 2, "{x:?}");
            assert!(x.names[0].starts_with("TORCH_FR_"), "newest first: {x:?}");
            assert!(
                x.names[1..].iter().all(|n| n.starts_with("TORCH_NCCL_")),
                "{x:?}"
            );
            assert!(x.source.contains("pytorch/pytorch"), "{x:?}");
        }
        assert!(s.iter().any(Setting::names_a_path));
    }
}
