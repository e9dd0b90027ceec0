//! `CUDA_VISIBLE_DEVICES` as CUDA reads it, so a rule can tell which GPUs a process could see and
//! which physical GPU its device ordinal N was.
//!
//! The forms (CUDA C Programming Guide, "CUDA Environment Variables"; NVIDIA MIG user guide):
//! - unset: every GPU is visible;
//! - empty: no GPU is visible;
//! - a comma list of GPU indices (`2,1`: device 0 is physical GPU 2), GPU UUIDs (`GPU-8932f937-...`,
//!   or a unique prefix such as `GPU-8932f937`), or MIG device UUIDs (`MIG-...`, or the older
//!   `MIG-GPU-<uuid>/<gi>/<ci>`);
//! - the list ends at the first invalid entry: `0,2,-1,1` makes GPUs 0 and 2 visible, not 1; a
//!   negative index, a repeated device, an empty entry or a word such as Slurm's `NoDevFiles`
//!   all end it, so `-1` alone or `NoDevFiles` leave no GPU.
//!
//! Spaces around entries are tolerated here and reported, since launchers differ in how they
//! write the list.

use std::fmt;

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A physical GPU index.
    Index(u32),
    /// A GPU UUID or a unique prefix of one, as written (`GPU-...`).
    GpuUuid(String),
    /// A MIG device (`MIG-...`).
    MigUuid(String),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Index(i) => write!(f, "GPU {i}"),
            Device::GpuUuid(u) | Device::MigUuid(u) => f.write_str(u),
        }
    }
}

/// Why the list stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// Position of the entry that ended the list (0-based).
    pub position: usize,
    /// The entry as written.
    pub entry: String,
    pub reason: &'static str,
}

/// A parsed `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibleDevices {
    /// The value as recorded (`None`: unset).
    pub raw: Option<String>,
    /// The visible devices, in CUDA's enumeration order (ordinal 0 first).
    pub devices: Vec<Device>,
    pub truncated: Option<Truncation>,
    /// Some entry had spaces around it.
    pub spaces: bool,
}

impl VisibleDevices {
    pub fn parse(value: Option<&str>) -> Self {
        let mut out = VisibleDevices {
            raw: value.map(str::to_owned),
            devices: Vec::new(),
            truncated: None,
            spaces: false,
        };
        let Some(v) = value else {
            return out;
        };
        if v.trim().is_empty() {
            return out;
        }
        for (position, entry) in v.split(',').enumerate() {
            let e = entry.trim();
            out.spaces |= e.len() != entry.len();
            let stop = |reason| Truncation {
                position,
                entry: entry.to_owned(),
                reason,
            };
            let dev = if e.is_empty() {
                Err(stop("an empty entry"))
            } else if let Some(rest) = e.strip_prefix("GPU-") {
                if rest.is_empty() {
                    Err(stop("a UUID prefix with no digits"))
                } else {
                    Ok(Device::GpuUuid(e.to_owned()))
                }
            } else if e.starts_with("MIG-") {
                Ok(Device::MigUuid(e.to_owned()))
            } else if e.starts_with('-') && e[1..].chars().all(|c| c.is_ascii_digit()) {
                Err(stop("a negative index"))
            } else {
                match e.parse::<u32>() {
                    Ok(i) => Ok(Device::Index(i)),
                    Err(_) => Err(stop("not an index, GPU- or MIG- UUID")),
                }
            };
            match dev {
                Ok(d) if out.devices.contains(&d) => {
                    out.truncated = Some(stop("a device listed twice"));
                    break;
                }
                Ok(d) => out.devices.push(d),
                Err(t) => {
                    out.truncated = Some(t);
                    break;
                }
            }
        }
        out
    }

    /// Whether the variable was set at all.
    pub fn is_set(&self) -> bool {
        self.raw.is_some()
    }

    /// How many GPUs the process can see: None when unset (all of the machine's), else the list's
    /// valid prefix. `installed`, when known, drops indices beyond the machine's GPUs (an index
    /// that does not exist ends the list like any invalid entry).
    pub fn count(&self, installed: Option<usize>) -> Option<usize> {
        self.raw.as_ref()?;
        let Some(n) = installed else {
            return Some(self.devices.len());
        };
        Some(
            self.devices
                .iter()
                .take_while(|d| !matches!(d, Device::Index(i) if *i as usize >= n))
                .count(),
        )
    }

    /// The physical device behind CUDA ordinal `ordinal` (None when unset: ordinal = physical index,
    /// or out of range).
    pub fn device(&self, ordinal: usize) -> Option<&Device> {
        self.devices.get(ordinal)
    }

    /// One line for evidence: `CUDA_VISIBLE_DEVICES="0,2,-1,1": 2 visible (GPU 0, GPU 2); the
    /// list ends at "-1" (a negative index)`.
    pub fn describe(&self) -> String {
        let Some(raw) = &self.raw else {
            return "CUDA_VISIBLE_DEVICES unset: every GPU of the machine is visible".to_owned();
        };
        let shown: Vec<String> = self.devices.iter().map(Device::to_string).collect();
        let mut s = format!(
            "CUDA_VISIBLE_DEVICES=\"{raw}\": {} visible{}",
            self.devices.len(),
            if shown.is_empty() {
                String::new()
            } else {
                format!(" ({})", shown.join(", "))
            }
        );
        if let Some(t) = &self.truncated {
            s.push_str(&format!("; the list ends at {:?} ({})", t.entry, t.reason));
        }
        if self.spaces {
            s.push_str("; entries have spaces around them");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &str) -> VisibleDevices {
        VisibleDevices::parse(Some(v))
    }

    #[test]
    fn unset_empty_and_plain_lists() {
        let u = VisibleDevices::parse(None);
        assert_eq!(u.count(None), None);
        assert!(!u.is_set());
        assert_eq!(p("").count(None), Some(0));
        assert_eq!(p("0,1,2,3").count(None), Some(4));
        let r = p("2,1");
        assert_eq!(r.device(0), Some(&Device::Index(2)));
        assert_eq!(r.device(1), Some(&Device::Index(1)));
        assert_eq!(r.device(2), None);
    }

    #[test]
    fn an_invalid_entry_ends_the_list() {
        let r = p("0,2,-1,1");
        assert_eq!(r.devices, vec![Device::Index(0), Device::Index(2)]);
        assert_eq!(r.truncated.as_ref().unwrap().reason, "a negative index");
        assert_eq!(p("-1").count(None), Some(0));
        assert_eq!(p("NoDevFiles").count(None), Some(0));
        assert_eq!(p("0,1,").count(None), Some(2));
        assert_eq!(p("0,0,1").count(None), Some(1));
        assert_eq!(p("1,x,2").count(None), Some(1));
        // An index beyond the machine's GPUs ends it too, when the machine's count is known.
        assert_eq!(p("0,9,1").count(Some(8)), Some(1));
        assert_eq!(p("0,9,1").count(None), Some(3));
    }

    #[test]
    fn uuids_and_mig_devices() {
        let r = p("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-1b2c");
        assert_eq!(r.count(None), Some(2));
        assert!(matches!(&r.devices[1], Device::GpuUuid(u) if u == "GPU-1b2c"));
        let m = p("MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0");
        assert!(matches!(m.devices[0], Device::MigUuid(_)));
        assert_eq!(
            p("MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f").count(None),
            Some(1)
        );
        assert_eq!(p("GPU-").count(None), Some(0));
    }

    #[test]
    fn spaces_are_tolerated_and_said() {
        let r = p("0, 1");
        assert_eq!(r.count(None), Some(2));
        assert!(r.spaces);
        assert!(r.describe().contains("spaces"));
        assert!(p("0,2,-1,1").describe().contains("ends at \"-1\""));
    }
}
