//! Where and how big a dump is: `NCCLSHIM_*` variables, their defaults, and the file name.
//! Read once, when the recorder is created (the first NCCL event), never on the record path.

use crate::dumpdir::DirPolicy;
use crate::layout::{WriterKind, DEFAULT_COMM_ENTRIES, DEFAULT_KEEP_SLOTS};
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
/// 8,192 slots = 1 MiB per thread: four recording threads stay under 8 MB (docs: README "Disk
/// and writeback"), and a ring rewritten continuously writes back at most that much per cycle.
pub const DEFAULT_PROFILER_SLOTS: u32 = 8192;

/// How to create one dump file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    pub dir: PathBuf,
    /// How far `dir` is trusted: the default per-user directory is checked strictly, one the
    /// user named is not (see [`crate::dumpdir`]).
    pub dir_policy: DirPolicy,
    pub writer_kind: WriterKind,
    pub rings: u32,
    /// Rounded up to a power of two.
    pub slots_per_ring: u32,
    pub arena_bytes: u64,
    /// Slots of the keep ring (rare records); rounded up to a power of two. Not an environment
    /// setting: the default fits any job, and only tools that want a tiny file (the fuzzer's
    /// seed, `examples/write_sample.rs`) lower it.
    pub keep_slots: u32,
    /// Entries of the communicator table (at least one).
    pub comm_entries: u32,
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

/// Whether `NCCLSHIM_SIGNALS` leaves fatal-signal capture on (default on; `0`, `false`, `no`
/// or `off` turns it off). Read once, when the shim installs its handlers.
pub fn signals_enabled() -> bool {
    match std::env::var("NCCLSHIM_SIGNALS") {
        Ok(v) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        ),
        Err(_) => true,
    }
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

/// The bounds of one numeric `NCCLSHIM_*` setting (the README's configuration table lists them).
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub var: &'static str,
    /// What the number counts, for the message ("rings", "slots", "bytes").
    pub unit: &'static str,
    pub min: u64,
    pub max: u64,
}

impl Limit {
    pub const RINGS: Limit = Limit {
        var: "NCCLSHIM_RINGS",
        unit: "rings",
        min: 1,
        max: 4096,
    };
    pub const ARENA: Limit = Limit {
        var: "NCCLSHIM_ARENA_BYTES",
        unit: "bytes",
        min: 4096,
        max: 1 << 40,
    };

    /// `NCCLSHIM_RING_SLOTS` or `NCCLSHIM_PROFILER_RING_SLOTS`.
    pub const fn slots(var: &'static str) -> Limit {
        Limit {
            var,
            unit: "slots",
            min: 16,
            max: 1 << 24,
        }
    }

    /// The value to use for `raw` (the variable's value; `None` or blank: unset), and the one
    /// line to print when `raw` could not be used as given: not a number → `default`; out of
    /// range → the nearest bound.
    pub fn apply(&self, raw: Option<&str>, default: u64) -> (u64, Option<String>) {
        let Some(raw) = raw.filter(|v| !v.trim().is_empty()) else {
            return (default, None);
        };
        let (lo, hi) = (show_size(self.min), show_size(self.max));
        match parse_size(raw) {
            None => (
                default,
                Some(format!(
                    "ncclshim: {}={raw} is not a number of {} ({lo}..={hi}); using {}\n",
                    self.var,
                    self.unit,
                    show_size(default)
                )),
            ),
            Some(n) if n < self.min || n > self.max => {
                let used = n.clamp(self.min, self.max);
                (
                    used,
                    Some(format!(
                        "ncclshim: {}={raw} is out of range ({lo}..={hi} {}); using {}\n",
                        self.var,
                        self.unit,
                        show_size(used)
                    )),
                )
            }
            Some(n) => (n, None),
        }
    }
}

/// `4096`, `64k`, `16M`, `1G`, `1024G`: the shortest exact form `parse_size` reads back.
pub fn show_size(n: u64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "k")] {
        if n >= 1 << 20 && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Writes one configuration complaint to stderr with a raw `write(2)`: this runs inside the
/// job's processes, where std's stderr lock or a panic on a closed descriptor are not ours to take.
pub fn warn(line: Option<String>) {
    if let Some(line) = line {
        // SAFETY: writing a valid buffer to fd 2; a short or failed write is acceptable.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
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
            dir_policy: DirPolicy::Chosen,
            writer_kind,
            rings,
            slots_per_ring: slots,
            arena_bytes: DEFAULT_ARENA_BYTES,
            keep_slots: DEFAULT_KEEP_SLOTS,
            comm_entries: DEFAULT_COMM_ENTRIES,
        }
        .normalized()
    }

    /// Defaults overridden by `NCCLSHIM_DIR`, `NCCLSHIM_RINGS`, `NCCLSHIM_RING_SLOTS`
    /// (`NCCLSHIM_PROFILER_RING_SLOTS` for the profiler) and `NCCLSHIM_ARENA_BYTES`.
    pub fn from_env(writer_kind: WriterKind) -> Self {
        let chosen = std::env::var_os("NCCLSHIM_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let policy = match chosen {
            Some(_) => DirPolicy::Chosen,
            None => DirPolicy::Private,
        };
        let mut cfg = Self::defaults(writer_kind, chosen.unwrap_or_else(default_dir));
        cfg.dir_policy = policy;
        let slots_var = match writer_kind {
            WriterKind::Profiler => "NCCLSHIM_PROFILER_RING_SLOTS",
            _ => "NCCLSHIM_RING_SLOTS",
        };
        let env = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        let (rings, why) = Limit::RINGS.apply(env(Limit::RINGS.var).as_deref(), cfg.rings.into());
        cfg.rings = rings as u32;
        warn(why);
        let slots = Limit::slots(slots_var);
        let (n, why) = slots.apply(env(slots_var).as_deref(), cfg.slots_per_ring.into());
        cfg.slots_per_ring = n as u32;
        warn(why);
        let (n, why) = Limit::ARENA.apply(env(Limit::ARENA.var).as_deref(), cfg.arena_bytes);
        cfg.arena_bytes = n;
        warn(why);
        cfg.normalized()
    }

    /// Rounds the ring sizes to powers of two (the writer masks instead of dividing).
    pub fn normalized(mut self) -> Self {
        self.slots_per_ring = self.slots_per_ring.max(2).next_power_of_two();
        self.keep_slots = self.keep_slots.max(2).next_power_of_two();
        self.comm_entries = self.comm_entries.max(1);
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
    fn invalid_values_name_the_variable_the_value_and_what_is_used() {
        let slots = Limit::slots("NCCLSHIM_RING_SLOTS");
        assert_eq!(slots.apply(None, 2048), (2048, None));
        assert_eq!(slots.apply(Some("  "), 2048), (2048, None));
        assert_eq!(slots.apply(Some("4096"), 2048), (4096, None));
        assert_eq!(
            slots.apply(Some("-5"), 2048),
            (
                2048,
                Some(
                    "ncclshim: NCCLSHIM_RING_SLOTS=-5 is not a number of slots (16..=16M); using 2048\n"
                        .into()
                )
            )
        );
        assert_eq!(
            Limit::RINGS.apply(Some("lots"), 64).1.as_deref(),
            Some("ncclshim: NCCLSHIM_RINGS=lots is not a number of rings (1..=4096); using 64\n")
        );
        assert_eq!(
            Limit::RINGS.apply(Some("0"), 64),
            (
                1,
                Some(
                    "ncclshim: NCCLSHIM_RINGS=0 is out of range (1..=4096 rings); using 1\n".into()
                )
            )
        );
        assert_eq!(
            Limit::ARENA.apply(Some("huge"), DEFAULT_ARENA_BYTES).1.as_deref(),
            Some("ncclshim: NCCLSHIM_ARENA_BYTES=huge is not a number of bytes (4096..=1024G); using 4M\n")
        );
        assert_eq!(Limit::ARENA.apply(Some("2T"), 4 << 20).0, 4 << 20);
        assert_eq!(Limit::ARENA.apply(Some("2048G"), 4 << 20).0, 1 << 40);
        assert_eq!(show_size(3 << 20), "3M");
        assert_eq!(show_size(1536), "1536");
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
