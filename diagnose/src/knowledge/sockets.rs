//! What a failed connection's text says about the path to the peer (`knowledge/sockets.toml`):
//! refused or dropped on the way, no route from this host, or the peer went away.

use serde::Deserialize;
use std::sync::LazyLock;

/// How a connection failed, for the path between two hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathOutcome {
    Blocked,
    NoRoute,
    PeerGone,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketOutcome {
    /// strerror() text as glibc words it.
    pub text: String,
    pub errno: String,
    pub number: u32,
    pub path: PathOutcome,
    pub meaning: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LocalOnly {
    prefixes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    outcome: Vec<SocketOutcome>,
    local_only_interfaces: LocalOnly,
}

static FILE: LazyLock<File> =
    LazyLock::new(|| super::parse("sockets.toml", include_str!("../../knowledge/sockets.toml")));

pub fn all() -> &'static [SocketOutcome] {
    &FILE.outcome
}

/// Whether an interface of this name exists only inside its host (a container or VM bridge,
/// the host side of a veth pair), so an address on it is not reachable from other hosts.
pub fn local_only_interface(name: &str) -> bool {
    FILE.local_only_interfaces
        .prefixes
        .iter()
        .any(|p| name.starts_with(p.as_str()))
}

/// The outcome whose text appears in `text` (case-insensitive), the first in the file's order.
pub fn outcome_in(text: &str) -> Option<&'static SocketOutcome> {
    let lower = text.to_ascii_lowercase();
    FILE.outcome
        .iter()
        .find(|o| lower.contains(&o.text.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_is_valid_and_texts_unique() {
        let all = all();
        assert!(all.len() >= 9);
        let mut texts: Vec<String> = all.iter().map(|o| o.text.to_ascii_lowercase()).collect();
        texts.sort();
        texts.dedup();
        assert_eq!(texts.len(), all.len(), "duplicate texts");
        assert!(all.iter().all(|o| !o.meaning.is_empty()));
    }

    #[test]
    fn host_local_interfaces_by_name() {
        for n in [
            "docker0",
            "br-1a2b3c",
            "veth3a1b",
            "virbr0",
            "cni0",
            "cali12ab",
        ] {
            assert!(local_only_interface(n), "{n}");
        }
        // A container's own eth0 is a veth too, but it is the routable interface.
        for n in ["eth0", "ens5", "ib0", "bond0", "enp65s0f0"] {
            assert!(!local_only_interface(n), "{n}");
        }
    }

    #[test]
    fn real_nccl_texts_are_classified() {
        let t = "socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort";
        assert_eq!(outcome_in(t).map(|o| o.path), Some(PathOutcome::Blocked));
        let t = "socketProgress: Connection closed by remote peer node-b<48262>";
        assert_eq!(outcome_in(t).map(|o| o.path), Some(PathOutcome::PeerGone));
        assert!(outcome_in("Cuda failure 'invalid argument'").is_none());
    }
}
