//! NCCL that `LD_PRELOAD` cannot see (`knowledge/static-nccl.toml`): the names an object exports
//! when NCCL is linked into it (torchcomms' NCCLX renames them `torchcomms_nccl*`), and what the
//! report and `doctor` say when a process ran NCCL that never reached the shim. Data, with the
//! sources of each naming, so a new renaming is one entry; the shim's own copy of the names
//! (`ncclshim_host_facts::EMBEDDED_NCCL_SYMBOLS`) is checked against it here.

use serde::Deserialize;
use std::sync::OnceLock;

/// A name that shows NCCL linked into an object.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Symbol {
    pub name: String,
    pub who: String,
    pub source: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Text {
    id: String,
    text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    symbol: Vec<Symbol>,
    text: Vec<Text>,
}

fn file() -> &'static File {
    static F: OnceLock<File> = OnceLock::new();
    F.get_or_init(|| {
        super::parse(
            "static-nccl.toml",
            include_str!("../../knowledge/static-nccl.toml"),
        )
    })
}

pub fn symbols() -> &'static [Symbol] {
    &file().symbol
}

/// The entry of an exported name.
pub fn symbol(name: &str) -> Option<&'static Symbol> {
    symbols().iter().find(|s| s.name == name)
}

/// The text `id`, with `{version}` and `{where}` filled in (empty for an unknown id, which the
/// tests rule out).
pub fn text(id: &str, version: &str, place: &str) -> String {
    file()
        .text
        .iter()
        .find(|t| t.id == id)
        .map(|t| {
            t.text
                .replace("{version}", version)
                .replace("{where}", place)
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shim looks up exactly these names, in this order (it cannot read this file).
    #[test]
    fn the_shims_names_are_the_knowledge_files() {
        let names: Vec<&str> = symbols().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ncclshim_host_facts::EMBEDDED_NCCL_SYMBOLS);
        assert!(symbols()
            .iter()
            .all(|s| !s.source.is_empty() && !s.who.is_empty()));
        assert!(symbol("torchcomms_ncclGetVersion")
            .unwrap()
            .source
            .contains("meta-pytorch/torchcomms"));
    }

    #[test]
    fn every_text_the_code_asks_for_exists_and_fills_in() {
        for id in [
            "invisible_with_plugin",
            "invisible_without_plugin",
            "remedy",
            "where_libtorch_cuda",
        ] {
            assert!(!text(id, "NCCL 2.27.3", "x").is_empty(), "{id}");
        }
        let t = text(
            "invisible_with_plugin",
            "NCCL 2.27.3",
            "torchcomms_ncclGetVersion in /x.so",
        );
        assert!(t.starts_with("this process ran NCCL 2.27.3 (the profiler plugin saw it) but no NCCL API call reached the shim: NCCL is linked statically or renamed (torchcomms_ncclGetVersion in /x.so)"), "{t}");
        assert!(!t.contains('{'));
    }
}
