//! Every `NCCLSHIM_*` variable, defined once: its name, default, documented range and meaning.
//!
//! The parsers read their bounds from here ([`crate::config`] for sizes and switches,
//! [`crate::clock`] for the clock, the profiler plugin's `mask` for `NCCLSHIM_PROFILE`), and the
//! README's configuration table is checked against this table (`dump/tests/settings_docs.rs`:
//! every variable listed with the same default and range, and every `NCCLSHIM_*` name the
//! crates' sources mention defined here), so the code and the documentation cannot drift apart.
//!
//! A value that cannot be used is never fatal and never silently followed: the setting's default
//! is used and one line on stderr names the variable, the value and the value used.

/// `4096`, `64k`, `16M`, `1G`, `1024G`: the shortest exact form
/// [`parse_size`](crate::config::parse_size) reads back. It lives here, with the settings,
/// because their documented ranges are shown with it; `config`, which imports the settings, parses.
pub fn show_size(n: u64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "k")] {
        if n >= 1 << 20 && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// The bounds of one numeric setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub var: &'static str,
    /// What the number counts, for the message ("rings", "slots", "bytes").
    pub unit: &'static str,
    pub min: u64,
    pub max: u64,
}

/// What values a setting accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// A number (`k`/`M`/`G` binary units) within the limit.
    Size(Limit),
    /// On/off: [`SWITCH_ON`] or [`SWITCH_OFF`] spellings, case-insensitive.
    Switch {
        /// What an unrecognised spelling is read as (said in the warning).
        unknown_reads_as: bool,
        /// What "on" does, for the warning (`recording off`).
        on_means: &'static str,
        off_means: &'static str,
    },
    /// One of these words, case-insensitive.
    OneOf(&'static [&'static str]),
    /// Free text, described for the documentation.
    Text(&'static str),
}

/// One `NCCLSHIM_*` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    /// The default as the documentation states it.
    pub default: &'static str,
    pub allowed: Allowed,
    /// Which part of ncclshim reads it.
    pub read_by: &'static str,
}

/// The spellings that turn a switch on (`NCCLSHIM_DISABLE=1`, `NCCLSHIM_SIGNALS=on`).
pub const SWITCH_ON: &[&str] = &["1", "true", "yes", "on"];
/// The spellings that turn a switch off.
pub const SWITCH_OFF: &[&str] = &["0", "false", "no", "off"];

/// 128-byte slots: 1M slots make a 128 MiB ring. Every recording thread gets one, so a larger
/// ring multiplies quickly (a value of 1G slots once made a 10.7 GB dump and 28 s of page
/// zeroing for a 0.01 s program); 1M keeps minutes of a busy thread's calls, far more than a
/// diagnosis reads.
pub const MAX_RING_SLOTS: u64 = 1 << 20;
// A ring stays a few hundred megabytes at most (128-byte slots), checked at compile time.
const _: () = assert!(MAX_RING_SLOTS * 128 <= 256 << 20);

/// Shim rings per dump. Rings are allocated when a thread first records, so the bound only
/// limits the ring directory; threads beyond it share the overflow ring.
pub const RINGS: Limit = Limit {
    var: "NCCLSHIM_RINGS",
    unit: "rings",
    min: 1,
    max: 4096,
};

/// Slots per shim ring (see [`MAX_RING_SLOTS`]); fewer than 16 would not hold one call's
/// start and end records across a few threads' interleaving.
pub const RING_SLOTS: Limit = Limit {
    var: "NCCLSHIM_RING_SLOTS",
    unit: "slots",
    min: 16,
    max: MAX_RING_SLOTS,
};

/// The same for the profiler plugin's rings.
pub const PROFILER_RING_SLOTS: Limit = Limit {
    var: "NCCLSHIM_PROFILER_RING_SLOTS",
    ..RING_SLOTS
};

/// Blob arena bytes. The arena holds the environment, library and host snapshots and NCCL's
/// error texts (a few KB in practice); 256M bounds the file for a job that fails millions of
/// times with long texts, 4096 is one page (the smallest the writer maps).
pub const ARENA_BYTES: Limit = Limit {
    var: "NCCLSHIM_ARENA_BYTES",
    unit: "bytes",
    min: 4096,
    max: 256 << 20,
};

pub const DIR: Setting = Setting {
    name: "NCCLSHIM_DIR",
    default: "`$TMPDIR/ncclshim-<uid>` (`/tmp/ncclshim-<uid>`)",
    allowed: Allowed::Text("a path"),
    read_by: "shim, profiler plugin, `ncclshim run`",
};

pub const DISABLE: Setting = Setting {
    name: "NCCLSHIM_DISABLE",
    default: "unset (off)",
    allowed: Allowed::Switch {
        // Setting the variable at all says "do not record": an unknown spelling is read that way.
        unknown_reads_as: true,
        on_means: "recording off",
        off_means: "recording on",
    },
    read_by: "shim, profiler plugin",
};

pub const SIGNALS: Setting = Setting {
    name: "NCCLSHIM_SIGNALS",
    default: "on",
    allowed: Allowed::Switch {
        // The default: capture costs nothing until a fatal signal arrives.
        unknown_reads_as: true,
        on_means: "fatal-signal capture on",
        off_means: "fatal-signal capture off",
    },
    read_by: "shim",
};

pub const CLOCK: Setting = Setting {
    name: "NCCLSHIM_CLOCK",
    default: "`auto`",
    allowed: Allowed::OneOf(&["auto", "tsc", "monotonic"]),
    read_by: "shim, profiler plugin",
};

pub const PROFILE: Setting = Setting {
    name: "NCCLSHIM_PROFILE",
    default: "`coll,p2p,kernelch`",
    allowed: Allowed::Text("event names (below)"),
    read_by: "profiler plugin",
};

pub const ENV_ALLOW: Setting = Setting {
    name: "NCCLSHIM_ENV_ALLOW",
    default: "unset",
    allowed: Allowed::Text("name prefixes"),
    read_by: "shim",
};

pub const RUN_ID: Setting = Setting {
    name: "NCCLSHIM_RUN_ID",
    default: "unset",
    allowed: Allowed::Text("any text"),
    read_by: "shim, profiler plugin",
};

pub const LIB_DIR: Setting = Setting {
    name: "NCCLSHIM_LIB_DIR",
    default: "unset",
    allowed: Allowed::Text("a path"),
    read_by: "`ncclshim run`, `python -m ncclshim`",
};

/// Read by the report, not the recorder: a way to have every PyTorch Flight Recorder dump read
/// (`diagnose/src/flight_recorder/lazy.rs` reads only those that can change the report), and what
/// the tests compare the planned reading with.
pub const FLIGHT_RECORDER_READ_ALL: Setting = Setting {
    name: "NCCLSHIM_FLIGHT_RECORDER_READ_ALL",
    default: "unset",
    allowed: Allowed::Text("any value"),
    read_by: "`ncclshim report`",
};

/// Read by the report, not the recorder: how many completed operations it keeps per thread and
/// per communicator (`diagnose/src/load.rs`; by default 256, fewer beyond 32,768 dump files or
/// summary processes), to check what a smaller keep changes on a job small enough to read in full.
pub const KEEP_OPERATIONS: Setting = Setting {
    name: "NCCLSHIM_KEEP_OPERATIONS",
    default: "256 (fewer for jobs over 16,384 ranks)",
    allowed: Allowed::Text("a positive number"),
    read_by: "`ncclshim report`",
};

/// Every variable, in the README table's order.
pub const SETTINGS: &[Setting] = &[
    DIR,
    DISABLE,
    Setting {
        name: RINGS.var,
        default: "64 (shim), 16 (profiler)",
        allowed: Allowed::Size(RINGS),
        read_by: "shim, profiler plugin",
    },
    Setting {
        name: RING_SLOTS.var,
        default: "2048",
        allowed: Allowed::Size(RING_SLOTS),
        read_by: "shim",
    },
    Setting {
        name: PROFILER_RING_SLOTS.var,
        default: "8192",
        allowed: Allowed::Size(PROFILER_RING_SLOTS),
        read_by: "profiler plugin",
    },
    PROFILE,
    ENV_ALLOW,
    CLOCK,
    SIGNALS,
    Setting {
        name: ARENA_BYTES.var,
        default: "4M",
        allowed: Allowed::Size(ARENA_BYTES),
        read_by: "shim, profiler plugin",
    },
    RUN_ID,
    LIB_DIR,
    FLIGHT_RECORDER_READ_ALL,
    KEEP_OPERATIONS,
];

impl Setting {
    /// The "allowed" column of the README table.
    pub fn allowed_text(&self) -> String {
        match self.allowed {
            Allowed::Size(l) => format!("{} … {}", show_size(l.min), show_size(l.max)),
            Allowed::Switch { .. } => format!(
                "{} (on), {} (off)",
                quoted_list(SWITCH_ON, "/"),
                quoted_list(SWITCH_OFF, "/")
            ),
            Allowed::OneOf(words) => quoted_list(words, ", "),
            Allowed::Text(t) => t.to_owned(),
        }
    }

    /// Reads a switch: `raw` is the variable's value (`None` or blank: unset → `default`).
    /// Returns the value used and the one line to print when `raw` is not a known spelling.
    pub fn switch(&self, raw: Option<&str>, default: bool) -> (bool, Option<String>) {
        let Allowed::Switch {
            unknown_reads_as,
            on_means,
            off_means,
        } = self.allowed
        else {
            return (default, None);
        };
        let Some(raw) = raw.filter(|v| !v.trim().is_empty()) else {
            return (default, None);
        };
        let word = raw.trim().to_ascii_lowercase();
        if SWITCH_ON.contains(&word.as_str()) {
            return (true, None);
        }
        if SWITCH_OFF.contains(&word.as_str()) {
            return (false, None);
        }
        let (used, means) = if unknown_reads_as {
            ("1", on_means)
        } else {
            ("0", off_means)
        };
        let line = format!(
            "ncclshim: {}={} is not one of {}, {}; using {used} ({means})\n",
            self.name,
            shown(raw),
            SWITCH_ON.join(", "),
            SWITCH_OFF.join(", "),
        );
        (unknown_reads_as, Some(line))
    }
}

/// `` `a`/`b` `` or `` `a`, `b` ``.
fn quoted_list(words: &[&str], sep: &str) -> String {
    words
        .iter()
        .map(|w| format!("`{w}`"))
        .collect::<Vec<_>>()
        .join(sep)
}

/// A value as a warning line shows it: control characters escaped (the line stays one line),
/// at most 64 characters (an accidental megabyte value must not flood the job's stderr).
pub fn shown(raw: &str) -> String {
    const MAX_CHARS: usize = 64;
    let mut out = String::new();
    for (i, c) in raw.chars().enumerate() {
        if i == MAX_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The setting of this name.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        DEFAULT_ARENA_BYTES, DEFAULT_PROFILER_RINGS, DEFAULT_PROFILER_SLOTS, DEFAULT_RINGS,
        DEFAULT_SLOTS,
    };

    #[test]
    fn documented_defaults_are_the_code_defaults_and_within_range() {
        let doc = |l: Limit| find(l.var).unwrap().default;
        assert_eq!(
            doc(RINGS),
            format!("{DEFAULT_RINGS} (shim), {DEFAULT_PROFILER_RINGS} (profiler)")
        );
        assert_eq!(doc(RING_SLOTS), show_size(DEFAULT_SLOTS.into()));
        assert_eq!(
            doc(PROFILER_RING_SLOTS),
            show_size(DEFAULT_PROFILER_SLOTS.into())
        );
        assert_eq!(doc(ARENA_BYTES), show_size(DEFAULT_ARENA_BYTES));
        for (l, d) in [
            (RINGS, u64::from(DEFAULT_RINGS)),
            (RINGS, DEFAULT_PROFILER_RINGS.into()),
            (RING_SLOTS, DEFAULT_SLOTS.into()),
            (PROFILER_RING_SLOTS, DEFAULT_PROFILER_SLOTS.into()),
            (ARENA_BYTES, DEFAULT_ARENA_BYTES),
        ] {
            assert!((l.min..=l.max).contains(&d), "{} default {d}", l.var);
        }
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert!(s.name.starts_with("NCCLSHIM_"), "{}", s.name);
            assert!(SETTINGS[..i].iter().all(|o| o.name != s.name), "{}", s.name);
        }
    }

    #[test]
    fn switches_accept_the_documented_spellings_and_say_what_else_is_used() {
        for on in ["1", "true", "YES", " on "] {
            assert_eq!(DISABLE.switch(Some(on), false), (true, None), "{on}");
        }
        for off in ["0", "False", "no", "off"] {
            assert_eq!(DISABLE.switch(Some(off), false), (false, None), "{off}");
        }
        assert_eq!(DISABLE.switch(None, false), (false, None));
        assert_eq!(DISABLE.switch(Some(" "), false), (false, None));
        assert_eq!(
            DISABLE.switch(Some("banana"), false),
            (
                true,
                Some(
                    "ncclshim: NCCLSHIM_DISABLE=banana is not one of 1, true, yes, on, 0, false, no, off; using 1 (recording off)\n"
                        .into()
                )
            )
        );
        assert_eq!(
            SIGNALS.switch(Some("enabled"), true),
            (
                true,
                Some(
                    "ncclshim: NCCLSHIM_SIGNALS=enabled is not one of 1, true, yes, on, 0, false, no, off; using 1 (fatal-signal capture on)\n"
                        .into()
                )
            )
        );
    }

    #[test]
    fn shown_values_stay_on_one_short_line() {
        assert_eq!(shown("a\nb\tc"), "a\\nb\\tc");
        let long = "x".repeat(1000);
        assert_eq!(shown(&long).chars().count(), 65);
        assert_eq!(shown("ünï"), "ünï");
    }
}
