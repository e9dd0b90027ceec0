//! PyTorch's communication backends as the report can tell them apart
//! (`knowledge/pytorch-backends.toml`): the Flight Recorder's profiling-name prefix of each, and
//! `TORCH_DIST_USE_NCCL2`, which decides whether `backend="nccl"` builds the new `nccl2`
//! ProcessGroup (the default from PyTorch 2.15) or the legacy ProcessGroupNCCL. Data with
//! sources, so a new backend or a moved default is one edit.

use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    pub name: String,
    pub what: String,
    /// Another writer whose profiling names carry the same prefix.
    #[serde(default)]
    pub same_prefix: Option<String>,
    pub source: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    pub variable: String,
    pub on: Vec<String>,
    pub off: Vec<String>,
    pub default_from: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    backend: Vec<Backend>,
    selector: Selector,
}

fn file() -> &'static File {
    static F: OnceLock<File> = OnceLock::new();
    F.get_or_init(|| {
        super::parse(
            "pytorch-backends.toml",
            include_str!("../../knowledge/pytorch-backends.toml"),
        )
    })
}

pub fn backends() -> &'static [Backend] {
    &file().backend
}

/// The backend a profiling name's prefix names (`"nccl2:all_reduce"` → nccl2).
pub fn by_profiling_name(profiling_name: &str) -> Option<&'static Backend> {
    let (prefix, _) = profiling_name.split_once(':')?;
    backends().iter().find(|b| b.name == prefix)
}

pub fn by_name(name: &str) -> Option<&'static Backend> {
    backends().iter().find(|b| b.name == name)
}

pub fn selector() -> &'static Selector {
    &file().selector
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiling_names_name_their_backend() {
        assert_eq!(by_profiling_name("nccl2:all_reduce").unwrap().name, "nccl2");
        assert_eq!(by_profiling_name("nccl:send 0->1").unwrap().name, "nccl");
        assert_eq!(
            by_profiling_name("nccl-lazy:recv").unwrap().name,
            "nccl-lazy"
        );
        assert_eq!(by_profiling_name("ncclx:all_gather").unwrap().name, "ncclx");
        assert!(by_profiling_name("all_reduce").is_none());
        assert!(by_profiling_name("c10d:all_reduce").is_none());
        assert!(backends().iter().all(|b| !b.source.is_empty()));
        let s = selector();
        assert_eq!(s.variable, "TORCH_DIST_USE_NCCL2");
        assert_eq!(
            (s.on.as_slice(), s.off.as_slice()),
            (&["1".to_owned()][..], &["0".to_owned()][..])
        );
    }
}
