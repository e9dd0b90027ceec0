//! Facts from the JSON snapshot blobs (Environment, Libraries, HostFacts, Gpu, Process), read
//! tolerantly: the shapes are those of the `host-facts` crate, but a missing or renamed key only
//! means "no evidence", never an error, so dumps from older or newer recorders still analyze.

use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LibFacts {
    pub nccl_paths: Vec<String>,
    pub nccl_version: Option<i64>,
    pub cuda_driver: Option<i64>,
    pub cuda_runtime: Option<i64>,
    pub nccl_static: bool,
    /// Objects other than a libnccl that hold NCCL (the recorder's own type; empty in dumps of
    /// older recorders).
    pub nccl_embedded: Vec<ncclshim_host_facts::EmbeddedNccl>,
    /// NCCL plugins (net, profiler, tuner, env) by path.
    pub plugins: Vec<String>,
    /// Every library as (kind, path).
    pub libs: Vec<(String, String)>,
}

/// Interfaces, IB ports and driver-listed GPUs are read with the recorder's own types (one
/// definition, in `host-facts`); only the older top-level fields below are read key by key.
pub use ncclshim_host_facts::{DriverGpu, IbPort, NetIf};

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct HostFacts {
    pub hostname: Option<String>,
    pub container_runtime: Option<String>,
    pub dockerenv: bool,
    pub dev_shm_bytes: Option<u64>,
    /// `/dev/shm`'s permission bits and owner, and whether the process could create files in
    /// it (its effective ids); None: not recorded (older recorders).
    pub dev_shm_mode: Option<u32>,
    pub dev_shm_uid: Option<u32>,
    pub dev_shm_writable: Option<bool>,
    pub memlock_soft_bytes: Option<u64>,
    pub memlock_unlimited: Option<bool>,
    /// RLIMIT_NOFILE soft limit; None: unlimited or not recorded.
    pub nofile_soft: Option<u64>,
    /// (path, exists) of the peermem files NCCL probes.
    pub peermem: Vec<(String, bool)>,
    pub libibverbs_dlopen: Option<bool>,
    pub infiniband: Vec<String>,
    pub dev_infiniband: Option<bool>,
    pub netifs: Option<Vec<NetIf>>,
    /// `Some(None)`: the dump says no NVIDIA kernel driver was loaded; `None`: not recorded.
    #[serde(default, with = "super::serial::maybe_absent")]
    pub nvidia_driver: Option<Option<String>>,
    /// `/dev/nvidia<N>` nodes, when recorded.
    pub nvidia_devices: Option<Vec<String>>,
    /// InfiniBand / RoCE ports with state, link layer and GIDs (empty when none or not recorded).
    pub ib_ports: Vec<IbPort>,
    /// IOMMU / ACS options of the kernel command line.
    pub kernel_iommu_options: Vec<String>,
    pub iommu_groups: Option<bool>,
    pub driver_gpus: Vec<DriverGpu>,
    pub nvswitch_devices: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuFacts {
    pub ordinal: Option<i64>,
    pub pci_bus_id: Option<String>,
    pub uuid: Option<String>,
    pub name: Option<String>,
}

fn str_of(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(str::to_owned)
}

fn int_of(v: &Value, keys: &[&str]) -> Option<i64> {
    keys.iter().find_map(|k| {
        let x = v.get(*k)?;
        x.as_i64()
            .or_else(|| x.as_u64().map(|u| u as i64))
            .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
    })
}

fn bool_of(v: &Value, keys: &[&str]) -> Option<bool> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_bool))
}

/// Environment: a flat object of strings (or `{"vars": {...}}`, or a list of `{name, value}`).
pub fn parse_env(v: &Value) -> BTreeMap<String, String> {
    let obj = v.get("vars").unwrap_or(v);
    let mut out = BTreeMap::new();
    if let Some(o) = obj.as_object() {
        for (k, val) in o {
            let s = match val {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            out.insert(k.clone(), s);
        }
    } else if let Some(a) = obj.as_array() {
        for item in a {
            if let (Some(k), Some(val)) = (str_of(item, &["name", "key"]), str_of(item, &["value"]))
            {
                out.insert(k, val);
            }
        }
    }
    out
}

pub fn parse_libs(v: &Value) -> LibFacts {
    let mut f = LibFacts {
        nccl_version: int_of(v, &["nccl_version"]),
        cuda_driver: int_of(v, &["cuda_driver", "cuda_driver_version"]),
        cuda_runtime: int_of(v, &["cuda_runtime", "cuda_runtime_version"]),
        nccl_static: bool_of(v, &["nccl_static"]).unwrap_or(false),
        nccl_embedded: v
            .get("nccl_embedded")
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .unwrap_or_default(),
        ..LibFacts::default()
    };
    if let Some(paths) = v.get("nccl_paths").and_then(Value::as_array) {
        f.nccl_paths = paths
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    if let Some(libs) = v.get("libs").and_then(Value::as_array) {
        for l in libs {
            let kind = str_of(l, &["kind"]).unwrap_or_default();
            let path = str_of(l, &["path"]).unwrap_or_default();
            if kind == "nccl" && !f.nccl_paths.contains(&path) {
                f.nccl_paths.push(path.clone());
            }
            if matches!(
                kind.as_str(),
                "nccl_net" | "nccl_profiler" | "nccl_tuner" | "nccl_env"
            ) {
                f.plugins.push(path.clone());
            }
            if f.cuda_driver.is_none() && kind == "cuda_driver" {
                f.cuda_driver = int_of(l, &["version"]);
            }
            if f.cuda_runtime.is_none() && kind == "cuda_runtime" {
                f.cuda_runtime = int_of(l, &["version"]);
            }
            f.libs.push((kind, path));
        }
    }
    f
}

pub fn parse_host(v: &Value) -> HostFacts {
    let container = v.get("container").cloned().unwrap_or(Value::Null);
    HostFacts {
        hostname: str_of(v, &["hostname"]),
        container_runtime: str_of(&container, &["runtime"]),
        dockerenv: bool_of(&container, &["dockerenv"]).unwrap_or(false),
        dev_shm_bytes: int_of(v, &["dev_shm_bytes"]).map(|x| x as u64),
        dev_shm_mode: int_of(v, &["dev_shm_mode"]).map(|x| x as u32),
        dev_shm_uid: int_of(v, &["dev_shm_uid"]).map(|x| x as u32),
        dev_shm_writable: bool_of(v, &["dev_shm_writable"]),
        memlock_soft_bytes: int_of(v, &["memlock_soft_bytes"]).map(|x| x as u64),
        nofile_soft: int_of(v, &["nofile_soft"]).map(|x| x as u64),
        memlock_unlimited: bool_of(v, &["memlock_unlimited"]),
        peermem: v
            .get("peermem")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((str_of(p, &["path"])?, bool_of(p, &["exists"])?)))
                    .collect()
            })
            .unwrap_or_default(),
        libibverbs_dlopen: bool_of(v, &["libibverbs_dlopen", "libibverbs"]),
        infiniband: v
            .get("infiniband")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        dev_infiniband: bool_of(v, &["dev_infiniband"]),
        nvidia_driver: v
            .get("nvidia_driver")
            .map(|d| d.as_str().map(str::to_owned)),
        nvidia_devices: v.get("nvidia_devices").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        }),
        netifs: v.get("netifs").and_then(Value::as_array).map(|a| {
            a.iter()
                .map(|n| NetIf {
                    name: str_of(n, &["name"]).unwrap_or_default(),
                    up: bool_of(n, &["up"]).unwrap_or(true),
                    loopback: bool_of(n, &["loopback"]).unwrap_or(false),
                    addrs: strings(n.get("addrs")),
                    prefix_lens: n
                        .get("prefix_lens")
                        .and_then(Value::as_array)
                        .map(|x| {
                            x.iter()
                                .map(|p| p.as_u64().unwrap_or(0).min(128) as u8)
                                .collect()
                        })
                        .unwrap_or_default(),
                    mtu: int_of(n, &["mtu"]).map(|m| m as u32),
                    virtual_if: bool_of(n, &["virtual_if"]).unwrap_or(false),
                })
                .collect()
        }),
        ib_ports: typed_list(v.get("ib_ports")),
        kernel_iommu_options: strings(v.get("kernel_iommu_options")),
        iommu_groups: bool_of(v, &["iommu_groups"]),
        driver_gpus: typed_list(v.get("driver_gpus")),
        nvswitch_devices: int_of(v, &["nvswitch_devices"]).unwrap_or(0) as u32,
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|x| {
            x.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A list of the recorder's own typed items; an item of another shape is skipped (no evidence,
/// never an error).
fn typed_list<T: serde::de::DeserializeOwned>(v: Option<&Value>) -> Vec<T> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| serde_json::from_value(x.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

pub fn parse_gpu(v: &Value) -> GpuFacts {
    GpuFacts {
        ordinal: int_of(v, &["ordinal", "device", "cuda_dev"]),
        pci_bus_id: str_of(v, &["pci_bus_id", "bus_id"]).map(|s| s.to_ascii_lowercase()),
        uuid: str_of(v, &["uuid"]),
        name: str_of(v, &["name"]),
    }
}

pub fn parse_cmdline(v: &Value) -> Vec<String> {
    v.get("cmdline")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl HostFacts {
    /// Whether a peermem file ending in `suffix` exists (None when not recorded).
    pub fn peermem_exists(&self, suffix: &str) -> Option<bool> {
        self.peermem
            .iter()
            .find(|(p, _)| p.ends_with(suffix))
            .map(|(_, e)| *e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerant_of_missing_and_odd_keys() {
        let h = parse_host(&json!({"hostname": "a"}));
        assert_eq!(h.hostname.as_deref(), Some("a"));
        assert!(h.netifs.is_none());
        assert!(h.libibverbs_dlopen.is_none());
        let l = parse_libs(
            &json!({"nccl_version": "21903", "libs": [{"kind": "nccl", "path": "/x/libnccl.so.2"}]}),
        );
        assert_eq!(l.nccl_version, Some(21903));
        assert_eq!(l.nccl_paths, vec!["/x/libnccl.so.2"]);
        let e = parse_env(&json!([{"name": "NCCL_NET", "value": "IB"}]));
        assert_eq!(e.get("NCCL_NET").map(String::as_str), Some("IB"));
        assert!(parse_env(&json!(42)).is_empty());
    }
}
