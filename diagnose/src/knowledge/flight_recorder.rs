//! The Flight Recorders' settings (`knowledge/flight-recorder.toml`): the environment
//! variables that turn PyTorch's and torchcomms' Flight Recorders on and name their dump files,
//! each under every name a release of that writer reads, newest first. `ncclshim run` sets them so that one command leaves both the shim's
//! dumps and PyTorch's own record of its collectives; the names live in the data file, with
//! their source in PyTorch, not in code.

use serde::Deserialize;
use std::sync::OnceLock;

/// One setting under all its names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    pub id: String,
    /// Which recorder reads it: `pytorch` (ProcessGroupNCCL) or `torchcomms` (its
    /// FlightRecorderHook).
    pub writer: String,
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
        let pytorch: Vec<&Setting> = s.iter().filter(|x| x.writer == "pytorch").collect();
        assert_eq!(pytorch.len(), 3, "{s:?}");
        for x in pytorch {
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

    /// torchcomms' recorder reads one name per setting, all `TORCHCOMM_FR_`, and writes its
    /// files under a prefix of its own (a process with both recorders keeps both files).
    #[test]
    fn torchcomms_settings_have_their_own_names_and_file_prefix() {
        let t: Vec<&Setting> = settings()
            .iter()
            .filter(|x| x.writer == "torchcomms")
            .collect();
        let names: Vec<&str> = t
            .iter()
            .flat_map(|x| x.names.iter().map(String::as_str))
            .collect();
        assert_eq!(
            names,
            ["TORCHCOMM_FR_BUFFER_SIZE", "TORCHCOMM_FR_DUMP_TEMP_FILE"]
        );
        assert!(t
            .iter()
            .all(|x| x.source.contains("meta-pytorch/torchcomms")));
        let prefixes: Vec<&str> = settings()
            .iter()
            .filter(|x| x.names_a_path())
            .map(|x| x.value.as_str())
            .collect();
        assert_eq!(prefixes, ["{fr_dir}/rank_", "{fr_dir}/torchcomms_rank_"]);
        assert!(settings()
            .iter()
            .all(|x| matches!(x.writer.as_str(), "pytorch" | "torchcomms")));
    }
}
