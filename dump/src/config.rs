//! Where and how big a dump is: `NCCLSHIM_*` variables, their defaults, and the file name.
//! Read once, when the recorder is created (the first NCCL event), never on the record path.

use crate::layout::WriterKind;
use std::ffi::OsString;
use std::path::PathBuf;

/// Default per-thread rings in a shim dump (threads beyond share one overflow ring).
pub const DEFAULT_RINGS: u32 = 64;
/// Default slots per ring (128 B each): 2,048 slots = 256 KiB per thread.
pub const DEFAULT_SLOTS: u32 = 2048;
/// Default blob arena: environment, library and host snapshots, error texts.
pub const DEFAULT_ARENA_BYTES: u64 = 4 << 20;
/// The profiler sees few threads but many events.
pub const DEFAULT_PROFILER_RINGS: u32 = 16;
pub const DEFAULT_PROFILER_SLOTS: u32 = 16384;

/// How to create one dump file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    pub dir: PathBuf,
    pub writer_kind: WriterKind,
    pub rings: u32,
    /// Rounded up to a power of two.
    pub slots_per_ring: u32,
    pub arena_bytes: u64,
}

/// The dump directory when `NCCLSHIM_DIR` is unset: `$TMPDIR/ncclshim-<uid>` (or `/tmp/...`).
pub fn default_dir() -> PathBuf {
    let base = std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| OsString::from("/tmp"));
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(base).join(format!("ncclshim-{uid}"))
}

/// Whether `NCCLSHIM_DISABLE` asks for no recording at all (any value but "", "0", "false", "no").
pub fn disabled_by_env() -> bool {
    match std::env::var("NCCLSHIM_DISABLE") {
        Ok(v) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no"
        ),
        Err(_) => false,
    }
}

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    parse_size(&v)
}

/// Parses `4096`, `64k`, `16M`, `1G` (binary units).
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, mult) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1u64 << 10),
        'm' | 'M' => (&v[..v.len() - 1], 1 << 20),
        'g' | 'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(mult)
}

impl RecorderConfig {
    /// Defaults for a writer kind, without looking at the environment.
    pub fn defaults(writer_kind: WriterKind, dir: PathBuf) -> Self {
        let (rings, slots) = match writer_kind {
            WriterKind::Profiler => (DEFAULT_PROFILER_RINGS, DEFAULT_PROFILER_SLOTS),
            _ => (DEFAULT_RINGS, DEFAULT_SLOTS),
        };
        Self {
            dir,
            writer_kind,
            rings,
            slots_per_ring: slots,
            arena_bytes: DEFAULT_ARENA_BYTES,
        }
        .normalized()
    }

    /// Defaults overridden by `NCCLSHIM_DIR`, `NCCLSHIM_RINGS`, `NCCLSHIM_RING_SLOTS`
    /// (`NCCLSHIM_PROFILER_RING_SLOTS` for the profiler) and `NCCLSHIM_ARENA_BYTES`.
    pub fn from_env(writer_kind: WriterKind) -> Self {
        let dir = std::env::var_os("NCCLSHIM_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(default_dir);
        let mut cfg = Self::defaults(writer_kind, dir);
        if let Some(n) = env_number("NCCLSHIM_RINGS") {
            cfg.rings = n.clamp(1, 4096) as u32;
        }
        let slots_var = match writer_kind {
            WriterKind::Profiler => "NCCLSHIM_PROFILER_RING_SLOTS",
            _ => "NCCLSHIM_RING_SLOTS",
        };
        if let Some(n) = env_number(slots_var) {
            cfg.slots_per_ring = n.clamp(16, 1 << 24) as u32;
        }
        if let Some(n) = env_number("NCCLSHIM_ARENA_BYTES") {
            cfg.arena_bytes = n.clamp(4096, 1 << 40);
        }
        cfg.normalized()
    }

    /// Rounds the ring size to a power of two (the writer masks instead of dividing).
    pub fn normalized(mut self) -> Self {
        self.slots_per_ring = self.slots_per_ring.max(2).next_power_of_two();
        self.rings = self.rings.max(1);
        self
    }
}

/// `<host>.<pid>.<start ticks>.<tag>.ncclshim`: a directory of a whole job sorts by host, then pid.
pub fn file_name(hostname: &str, pid: u32, start_ticks: u64, kind: WriterKind) -> String {
    let host: String = hostname
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{host}.{pid}.{start_ticks}.{}.ncclshim", kind.file_tag())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size(" 16M "), Some(16 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn ring_sizes_become_powers_of_two() {
        let mut c = RecorderConfig::defaults(WriterKind::Shim, "/x".into());
        c.slots_per_ring = 1000;
        assert_eq!(c.normalized().slots_per_ring, 1024);
    }

    #[test]
    fn file_names_sort_by_host_and_are_safe() {
        assert_eq!(
            file_name("node-1.cluster/x", 42, 7, WriterKind::Shim),
            "node-1_cluster_x.42.7.shim.ncclshim"
        );
    }
}
