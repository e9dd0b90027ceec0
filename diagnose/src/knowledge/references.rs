//! The identifiers error texts and launcher variables name (`knowledge/references.toml`): PCI
//! bus ids, CUDA device ordinals, ranks, peers, local ranks, rank counts, HCAs with ports and
//! network interfaces, each with the forms NCCL prints it in, as regular expressions.
//!
//! Why data: NCCL prints the same identifier in many messages and new releases add more; the
//! forms (`busId %lx`, `cudaDev %d`, `NET/IB : %s:%d`) are few and stable, so one table of
//! forms finds them in messages no rule was written for. This module only parses and finds;
//! what a token *is* in a job is [`crate::model::references`]'s work.

use regex::Regex;
use serde::Deserialize;
use std::sync::LazyLock;

/// What sort of thing a token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefKind {
    PciDevice,
    CudaDevice,
    PeerRank,
    LocalRank,
    Nranks,
    Rank,
    IbDevice,
    NetInterface,
}

impl RefKind {
    /// The name used in evidence values (`reference_kind`).
    pub fn id(self) -> &'static str {
        match self {
            RefKind::PciDevice => "pci_device",
            RefKind::CudaDevice => "cuda_device",
            RefKind::PeerRank => "peer_rank",
            RefKind::LocalRank => "local_rank",
            RefKind::Nranks => "nranks",
            RefKind::Rank => "rank",
            RefKind::IbDevice => "ib_device",
            RefKind::NetInterface => "net_interface",
        }
    }
}

/// How the captured `v` group is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValueForm {
    Decimal,
    BusInt,
    BusText,
    Name,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FormEntry {
    regex: String,
    source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KindEntry {
    id: RefKind,
    what: String,
    value: ValueForm,
    form: Vec<FormEntry>,
}

/// How a variable's value lists names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListForm {
    /// NCCL's `NCCL_IB_HCA` / `NCCL_SOCKET_IFNAME`: comma list; `^` excludes, `=` exact names,
    /// otherwise prefixes; HCA entries may carry `:port`.
    NcclPrefixList,
    /// Plain comma-separated exact names.
    CommaList,
}

/// A variable whose value names things of one kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variable {
    pub name: String,
    pub kind: RefKind,
    pub list: ListForm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    kind: Vec<KindEntry>,
    variable: Vec<Variable>,
}

/// One compiled form.
pub struct Form {
    pub kind: RefKind,
    pub value: ValueForm,
    pub regex: Regex,
    pub source: &'static str,
}

struct Compiled {
    forms: Vec<Form>,
    variables: Vec<Variable>,
    whats: Vec<(RefKind, String)>,
}

static FILE: LazyLock<Compiled> = LazyLock::new(|| {
    let file: File = super::parse(
        "references.toml",
        include_str!("../../knowledge/references.toml"),
    );
    let mut forms = Vec::new();
    let mut whats = Vec::new();
    for k in file.kind {
        whats.push((k.id, k.what));
        for f in k.form {
            let regex = Regex::new(&f.regex).unwrap_or_else(|e| {
                panic!(
                    "diagnose/knowledge/references.toml: bad regex {:?}: {e}",
                    f.regex
                )
            });
            assert!(
                regex.capture_names().any(|n| n == Some("v")),
                "diagnose/knowledge/references.toml: regex {:?} has no group `v`",
                f.regex
            );
            forms.push(Form {
                kind: k.id,
                value: k.value,
                regex,
                source: Box::leak(f.source.into_boxed_str()),
            });
        }
    }
    Compiled {
        forms,
        variables: file.variable,
        whats,
    }
});

/// Every form, kinds in the file's order (earlier kinds claim a span first).
pub fn forms() -> &'static [Form] {
    &FILE.forms
}

/// The variables whose values name things.
pub fn variables() -> &'static [Variable] {
    &FILE.variables
}

/// What a kind is, in words (`PCI bus id of a GPU`).
pub fn what(kind: RefKind) -> &'static str {
    FILE.whats
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, w)| w.as_str())
        .unwrap_or("identifier")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_is_valid_and_every_form_has_a_source() {
        assert!(forms().len() >= 15);
        assert!(forms().iter().all(|f| !f.source.trim().is_empty()));
        for k in [
            RefKind::PciDevice,
            RefKind::CudaDevice,
            RefKind::PeerRank,
            RefKind::LocalRank,
            RefKind::Nranks,
            RefKind::Rank,
            RefKind::IbDevice,
            RefKind::NetInterface,
        ] {
            assert!(forms().iter().any(|f| f.kind == k), "{k:?} has no form");
            assert_ne!(what(k), "identifier");
        }
        assert!(variables().iter().any(|v| v.name == "NCCL_IB_HCA"));
    }
}
