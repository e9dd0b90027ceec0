//! The paths NCCL's init takes through the CUDA driver (`knowledge/driver-paths.toml`): which
//! driver functions show each, and what makes every rank take the same one.

use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverPath {
    pub id: String,
    pub functions: Vec<String>,
    pub path: String,
    pub remedy: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    path: Vec<DriverPath>,
}

fn all() -> &'static [DriverPath] {
    static F: OnceLock<File> = OnceLock::new();
    &F.get_or_init(|| {
        super::parse(
            "driver-paths.toml",
            include_str!("../../knowledge/driver-paths.toml"),
        )
    })
    .path
}

/// The path a driver function belongs to.
pub fn of_function(name: &str) -> Option<&'static DriverPath> {
    all().iter().find(|p| p.functions.iter().any(|f| f == name))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_file_parses_and_names_each_function_once() {
        let mut seen = std::collections::BTreeSet::new();
        for p in super::all() {
            assert!(!p.source.is_empty() && !p.remedy.is_empty());
            for f in &p.functions {
                assert!(seen.insert(f.clone()), "{f} twice");
            }
        }
        assert_eq!(super::of_function("cuMemCreate").unwrap().id, "cumem");
    }
}
