//! Where and how big a dump is: `NCCLSHIM_*` variables, their defaults, and the file name.
//! Read once, when the recorder is created (the first NCCL event), never on the record path;
//! a relative `NCCLSHIM_DIR` is resolved earlier, when the library loads
//! ([`resolve_dir_at_load`]).
//! The variables' names, ranges and documented defaults are defined in [`crate::settings`].

use crate::dumpdir::DirPolicy;
use crate::settings;
pub use crate::settings::{show_size, Limit};
use ncclshim_format::layout::{WriterKind, DEFAULT_COMM_ENTRIES, DEFAULT_KEEP_SLOTS};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

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

/// `NCCLSHIM_DIR` as it was when the library was loaded (`None` inside: unset then): its value
/// and that value made absolute against the working directory of that moment.
static DIR_AT_LOAD: OnceLock<Option<(OsString, PathBuf)>> = OnceLock::new();

/// Resolves a relative `NCCLSHIM_DIR` against the working directory of now, for the dump created
/// later (issue 36: a daemon that changed directory to `/` before its first NCCL call wrote to
/// `/reldumps`). Called from the shim's constructor, when the process starts under the preload;
/// idempotent, no file, no output. A working directory that cannot be read leaves the value to
/// be resolved when the dump is created, as without this call.
pub fn resolve_dir_at_load() {
    DIR_AT_LOAD.get_or_init(|| {
        let value = dir_value()?;
        let resolved = std::path::absolute(&value).ok()?;
        Some((value, resolved))
    });
}

/// `NCCLSHIM_DIR` now, when set and not blank.
fn dir_value() -> Option<OsString> {
    std::env::var_os(settings::DIR.name).filter(|v| !v.is_empty())
}

/// The directory `NCCLSHIM_DIR` names: as resolved at load when the value is still the one seen
/// then, else (set or changed by the program since, or no constructor ran) as it reads now.
fn chosen_dir() -> Option<PathBuf> {
    let now = dir_value()?;
    match DIR_AT_LOAD.get() {
        Some(Some((seen, resolved))) if *seen == now => Some(resolved.clone()),
        _ => Some(PathBuf::from(now)),
    }
}

/// Whether `NCCLSHIM_DISABLE` asks for no recording at all ([`settings::DISABLE`]: `1`/`true`/
/// `yes`/`on` do; unset, blank and `0`/`false`/`no`/`off` do not; any other value does, with one
/// line on stderr saying so).
pub fn disabled_by_env() -> bool {
    let raw = env_text(settings::DISABLE.name);
    let (disabled, why) = settings::DISABLE.switch(raw.as_deref(), false);
    warn(why);
    disabled
}

/// Whether `NCCLSHIM_SIGNALS` leaves fatal-signal capture on ([`settings::SIGNALS`]: default on;
/// `0`/`false`/`no`/`off` turns it off; an unknown value keeps it on, with one line on stderr).
/// Read once, when the shim installs its handlers.
pub fn signals_enabled() -> bool {
    let raw = env_text(settings::SIGNALS.name);
    let (on, why) = settings::SIGNALS.switch(raw.as_deref(), true);
    warn(why);
    on
}

/// A variable's value as text (non-UTF-8 bytes replaced, so a bad value is reported, not lost).
fn env_text(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
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

impl Limit {
    /// The value to use for `raw` (the variable's value; `None` or blank: unset), and the one
    /// line to print when `raw` could not be used as given. Not a number or out of range →
    /// `default`, never the nearest bound: a bound is as wrong a guess as any other, and the
    /// upper one is the largest file the recorder can make.
    pub fn apply(&self, raw: Option<&str>, default: u64) -> (u64, Option<String>) {
        let Some(raw) = raw.filter(|v| !v.trim().is_empty()) else {
            return (default, None);
        };
        let (lo, hi) = (show_size(self.min), show_size(self.max));
        let problem = match parse_size(raw) {
            None => format!("is not a number of {} ({lo}..={hi})", self.unit),
            Some(n) if n < self.min || n > self.max => {
                format!("is out of range ({lo}..={hi} {})", self.unit)
            }
            Some(n) => return (n, None),
        };
        let line = format!(
            "ncclshim: {}={} {problem}; using {}\n",
            self.var,
            settings::shown(raw),
            show_size(default)
        );
        (default, Some(line))
    }
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
        let chosen = chosen_dir();
        let policy = match chosen {
            Some(_) => DirPolicy::Chosen,
            None => DirPolicy::Private,
        };
        let mut cfg = Self::defaults(writer_kind, chosen.unwrap_or_else(default_dir));
        cfg.dir_policy = policy;
        let slots = match writer_kind {
            WriterKind::Profiler => settings::PROFILER_RING_SLOTS,
            _ => settings::RING_SLOTS,
        };
        let (rings, why) =
            settings::RINGS.apply(env_text(settings::RINGS.var).as_deref(), cfg.rings.into());
        cfg.rings = rings as u32;
        warn(why);
        let (n, why) = slots.apply(env_text(slots.var).as_deref(), cfg.slots_per_ring.into());
        cfg.slots_per_ring = n as u32;
        warn(why);
        let arena = settings::ARENA_BYTES;
        let (n, why) = arena.apply(env_text(arena.var).as_deref(), cfg.arena_bytes);
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
        let slots = settings::RING_SLOTS;
        assert_eq!(slots.apply(None, 2048), (2048, None));
        assert_eq!(slots.apply(Some("  "), 2048), (2048, None));
        assert_eq!(slots.apply(Some("4096"), 2048), (4096, None));
        assert_eq!(slots.apply(Some("1M"), 2048), (1 << 20, None));
        assert_eq!(
            slots.apply(Some("-5"), 2048),
            (
                2048,
                Some(
                    "ncclshim: NCCLSHIM_RING_SLOTS=-5 is not a number of slots (16..=1M); using 2048\n"
                        .into()
                )
            )
        );
        assert_eq!(
            settings::RINGS.apply(Some("lots"), 64).1.as_deref(),
            Some("ncclshim: NCCLSHIM_RINGS=lots is not a number of rings (1..=4096); using 64\n")
        );
        assert_eq!(
            settings::ARENA_BYTES
                .apply(Some("huge"), DEFAULT_ARENA_BYTES)
                .1
                .as_deref(),
            Some("ncclshim: NCCLSHIM_ARENA_BYTES=huge is not a number of bytes (4096..=256M); using 4M\n")
        );
        assert_eq!(show_size(3 << 20), "3M");
        assert_eq!(show_size(1536), "1536");
    }

    /// Issue 22 item 7: `NCCLSHIM_RING_SLOTS=99999999999` made a 10.7 GB dump by clamping to
    /// the maximum; every out-of-range value, either side, now falls back to the default.
    #[test]
    fn out_of_range_values_use_the_default_not_the_nearest_bound() {
        let cases: &[(Limit, &str, u64, &str)] = &[
            (settings::RINGS, "0", 64, "(1..=4096 rings); using 64"),
            (settings::RINGS, "5000", 64, "(1..=4096 rings); using 64"),
            (
                settings::RING_SLOTS,
                "4",
                2048,
                "(16..=1M slots); using 2048",
            ),
            (
                settings::RING_SLOTS,
                "99999999999",
                2048,
                "(16..=1M slots); using 2048",
            ),
            (
                settings::PROFILER_RING_SLOTS,
                "1G",
                8192,
                "(16..=1M slots); using 8192",
            ),
            (
                settings::ARENA_BYTES,
                "2048G",
                4 << 20,
                "(4096..=256M bytes); using 4M",
            ),
            (
                settings::ARENA_BYTES,
                "100",
                4 << 20,
                "(4096..=256M bytes); using 4M",
            ),
        ];
        for &(limit, raw, default, tail) in cases {
            let (used, line) = limit.apply(Some(raw), default);
            assert_eq!(used, default, "{}={raw}", limit.var);
            assert_eq!(
                line.as_deref(),
                Some(format!("ncclshim: {}={raw} is out of range {tail}\n", limit.var).as_str())
            );
        }
        // Numbers too large for u64 are not numbers.
        assert_eq!(
            settings::RING_SLOTS
                .apply(Some("99999999999999999999G"), 2048)
                .0,
            2048
        );
    }

    proptest::proptest! {
        /// Whatever the value: no panic, a value within range, at most one line of warning.
        #[test]
        fn any_value_gives_a_usable_size(raw in "\\PC{0,30}|[0-9]{0,25}[kKmMgG ]?") {
            for limit in [settings::RINGS, settings::RING_SLOTS, settings::ARENA_BYTES] {
                let default = limit.min.max(64);
                let (used, line) = limit.apply(Some(&raw), default);
                proptest::prop_assert!((limit.min..=limit.max).contains(&used));
                if let Some(line) = line {
                    proptest::prop_assert_eq!(line.matches('\n').count(), 1);
                    proptest::prop_assert_eq!(used, default);
                }
            }
        }
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
