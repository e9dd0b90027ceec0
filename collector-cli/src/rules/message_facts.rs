//! The recorded facts of one process as the message knowledge reads them
//! ([`crate::knowledge::messages::Facts`]): environment, host facts, interfaces, NCCL version.
//! What was not recorded stays unknown, so it never counts for or against a cause.

use crate::knowledge::messages::{Facts, HostFlag, HostNumber};
use crate::model::ProcessModel;

pub struct ProcessFacts<'a>(pub &'a ProcessModel);

/// `10.0.0.2<45763>`, `[fe80::1]:5000`, `10.0.0.2:5000` → the bare address (or the text itself).
fn bare_address(v: &str) -> &str {
    let v = v.split('<').next().unwrap_or(v);
    if let Some(rest) = v.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match v.rsplit_once(':') {
        // One colon: host:port; several: an IPv6 address without brackets.
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => v,
    }
}

impl Facts for ProcessFacts<'_> {
    fn env(&self, name: &str) -> Option<Option<String>> {
        self.0.env.as_ref().map(|e| e.get(name).cloned())
    }

    fn host_number(&self, fact: HostNumber) -> Option<u64> {
        let h = self.0.host_facts.as_ref()?;
        match fact {
            HostNumber::DevShmBytes => h.dev_shm_bytes,
            HostNumber::MemlockSoftBytes => h.memlock_soft_bytes,
        }
    }

    fn host_flag(&self, fact: HostFlag) -> Option<bool> {
        let h = self.0.host_facts.as_ref()?;
        match fact {
            HostFlag::MemlockUnlimited => h.memlock_unlimited,
            HostFlag::LibibverbsDlopen => h.libibverbs_dlopen,
            HostFlag::DevInfiniband => h.dev_infiniband,
            HostFlag::IbDevices => Some(!h.infiniband.is_empty() || !h.ib_ports.is_empty()),
            HostFlag::InContainer => Some(h.container_runtime.is_some() || h.dockerenv),
            HostFlag::PeermemLoaded => h
                .peermem_exists("nvidia_peermem/version")
                .or_else(|| h.peermem_exists("nv_mem/version")),
        }
    }

    fn local_interface(&self, value: &str) -> Option<bool> {
        let ifs = self.0.host_facts.as_ref()?.netifs.as_ref()?;
        let addr = bare_address(value);
        Some(
            ifs.iter()
                .any(|i| i.name == value || i.addrs.iter().any(|a| a == addr)),
        )
    }

    fn nccl_version(&self) -> Option<u64> {
        self.0.nccl_version
    }
}

#[cfg(test)]
mod tests {
    use super::bare_address;

    #[test]
    fn addresses_lose_their_port() {
        assert_eq!(bare_address("10.0.0.2<45763>"), "10.0.0.2");
        assert_eq!(bare_address("[fe80::1%eth0]:5000"), "fe80::1%eth0");
        assert_eq!(bare_address("10.0.0.2:5000"), "10.0.0.2");
        assert_eq!(bare_address("fe80::1"), "fe80::1");
        assert_eq!(bare_address("eth0"), "eth0");
    }
}
