//! The recorded facts of one process as the message knowledge reads them
//! ([`crate::knowledge::messages::Facts`]): environment, host facts, interfaces, NCCL version.
//! What was not recorded stays unknown, so it never counts for or against a cause.

use crate::knowledge::messages::{Facts, HostFlag, HostNumber};
use crate::model::facts::IbPort;
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
        if fact == HostNumber::OperationsCompleted {
            return self.operations_completed();
        }
        let h = self.0.host_facts.as_ref()?;
        match fact {
            HostNumber::DevShmBytes => h.dev_shm_bytes,
            HostNumber::MemlockSoftBytes => h.memlock_soft_bytes,
            HostNumber::NvswitchDevices => Some(u64::from(h.nvswitch_devices)),
            // Zero listed GPUs means the driver's list was not readable, not "no GPU".
            HostNumber::DriverGpus => {
                (!h.driver_gpus.is_empty()).then_some(h.driver_gpus.len() as u64)
            }
            HostNumber::OperationsCompleted => unreachable!("answered above"),
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
            HostFlag::Roce => (!h.ib_ports.is_empty()).then(|| h.ib_ports.iter().any(is_roce)),
            HostFlag::SelectedGidLinkLocal => self.selected_gid_link_local(),
            HostFlag::DevShmWritable => h.dev_shm_writable,
            HostFlag::IbPortDown => (!h.ib_ports.is_empty()).then(|| {
                h.ib_ports
                    .iter()
                    .any(|p| p.state.as_deref().is_some_and(|s| !s.contains("ACTIVE")))
            }),
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

    fn libraries(&self) -> Option<Vec<String>> {
        let l = self.0.libs.as_ref()?;
        Some(l.libs.iter().map(|(_, p)| p.clone()).collect())
    }

    fn failed_calls(&self) -> Option<Vec<String>> {
        self.0.has_shim.then(|| {
            self.0
                .error_calls()
                .map(|(_, c)| c.name.to_string())
                .collect()
        })
    }
}

/// Whether an IB port runs over Ethernet (RoCE): its link layer says so.
pub(crate) fn is_roce(p: &IbPort) -> bool {
    p.link_layer
        .as_deref()
        .is_some_and(|l| l.eq_ignore_ascii_case("ethernet"))
}

impl ProcessFacts<'_> {
    /// Operations whose call returned: the communicator table's count (never lost to ring
    /// wrap), or the recorded operation calls when there is no table.
    fn operations_completed(&self) -> Option<u64> {
        let pm = self.0;
        if !pm.has_shim {
            return None;
        }
        let returned = |ok: bool| {
            pm.ops
                .iter()
                .filter(|o| {
                    pm.calls
                        .get(o.call_index)
                        .is_some_and(|c| !c.in_flight() && (c.rc == 0) == ok)
                })
                .count() as u64
        };
        // The table counts every returned call, the failing one too.
        let table: u64 = pm.progress.iter().map(|c| c.completed).sum();
        Some(table.saturating_sub(returned(false)).max(returned(true)))
    }

    /// Whether the GID at NCCL_IB_GID_INDEX (index 0, NCCL's old default, when unset) of a
    /// RoCE port is link-local or missing. Which NCCL versions use index 0 when the variable
    /// is unset is the knowledge's business (a `nccl_below` condition next to this one).
    fn selected_gid_link_local(&self) -> Option<bool> {
        let h = self.0.host_facts.as_ref()?;
        let roce: Vec<&IbPort> = h.ib_ports.iter().filter(|p| is_roce(p)).collect();
        if roce.is_empty() {
            return None;
        }
        let index = match self.env(GID_INDEX_VAR)? {
            Some(v) => v.trim().parse::<u32>().ok()?,
            None => 0,
        };
        Some(roce.iter().any(|p| {
            p.gids
                .iter()
                .find(|g| g.index == index)
                .is_none_or(|g| g.gid.to_ascii_lowercase().starts_with("fe80:"))
        }))
    }
}

const GID_INDEX_VAR: &str = "NCCL_IB_GID_INDEX";

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
