//! Platform facts for transport hangs (`knowledge/hardware.toml`): GPU models with unreliable
//! PCIe P2P, IOMMU boot options, the NCCL version that selects RoCE GIDs by itself.

use serde::Deserialize;
use std::sync::LazyLock;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pUnreliableGpu {
    pub model_contains: String,
    pub note: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Iommu {
    pub enabling_options: Vec<String>,
    pub passthrough_options: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roce {
    /// NCCL version code (22105 = 2.21.5) from which the GID index is chosen automatically.
    pub gid_auto_selection_since: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub p2p_unreliable_gpu: Vec<P2pUnreliableGpu>,
    pub iommu: Iommu,
    pub roce: Roce,
}

static HARDWARE: LazyLock<Hardware> = LazyLock::new(|| {
    super::parse(
        "hardware.toml",
        include_str!("../../knowledge/hardware.toml"),
    )
});

pub fn get() -> &'static Hardware {
    &HARDWARE
}

impl Hardware {
    /// The note about `model` when its PCIe P2P is known to be unreliable.
    pub fn p2p_unreliable(&self, model: &str) -> Option<&str> {
        self.p2p_unreliable_gpu
            .iter()
            .find(|g| model.contains(&g.model_contains))
            .map(|g| g.note.as_str())
    }

    /// Whether the boot options leave the IOMMU translating device DMA (enabled, no pass-through).
    pub fn iommu_translating(&self, options: &[String]) -> bool {
        let has = |list: &[String]| options.iter().any(|o| list.contains(o));
        has(&self.iommu.enabling_options) && !has(&self.iommu.passthrough_options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_parses_and_answers() {
        let h = get();
        assert!(h.p2p_unreliable("NVIDIA GeForce RTX 4090").is_some());
        assert!(h.p2p_unreliable("NVIDIA H100 80GB HBM3").is_none());
        let on = vec!["intel_iommu=on".to_owned()];
        assert!(h.iommu_translating(&on));
        let pt = vec!["intel_iommu=on".to_owned(), "iommu=pt".to_owned()];
        assert!(!h.iommu_translating(&pt));
        assert_eq!(h.roce.gid_auto_selection_since, 22105);
    }
}
