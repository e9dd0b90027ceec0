//! The activation mask: which NCCL event types the plugin asks for, from `NCCLSHIM_PROFILE`.
//!
//! NCCL reads one process-global `int` (the pointer it hands every `init`) and starts an event
//! only when its bit, or a descendant's bit, is set. The default is cheap enough for production
//! and still gives per-collective GPU time: `coll,p2p,kernelch`, with the kernel channels of
//! each operation folded into one GPU-done record (earliest channel start, latest channel
//! stop) instead of a record per channel; add `channels` for the per-channel records. Ancestors that NCCL starts on
//! its own (GroupApi, CollApi, legacy Group...) are answered with a NULL handle unless asked for,
//! which also spares NCCL their stop calls.
//!
//! Syntax: a comma (or `|`, `+`, space) separated list of event names, `default`, `all`,
//! `none`, `api` (groupapi,collapi,p2papi,kernellaunch), `proxy` (proxyop,proxystep,proxyctrl),
//! `ce` (cecoll,cesync,cebatch) or a number (`0x46`); `-name` removes. Case-insensitive.

use crate::abi::event::*;

/// `coll,p2p,kernelch`.
pub const DEFAULT_MASK: u32 = COLL | P2P | KERNEL_CH;
/// Every event type any version defines.
pub const EVENT_BITS: u32 = 0xffff;
/// Not an NCCL event bit (NCCL never sees it): one record per kernel channel (CPU start/stop
/// times and the channel's own GPU times) instead of one GPU-done record per operation.
pub const CHANNEL_RECORDS: u32 = 1 << 16;
/// `all`: every event type, per-channel records included.
pub const ALL_MASK: u32 = EVENT_BITS | CHANNEL_RECORDS;

/// Event names in bit order (bit i = `NAMES[i]`).
pub const NAMES: [&str; 16] = [
    "group",
    "coll",
    "p2p",
    "proxyop",
    "proxystep",
    "proxyctrl",
    "kernelch",
    "netplugin",
    "groupapi",
    "collapi",
    "p2papi",
    "kernellaunch",
    "cecoll",
    "cesync",
    "cebatch",
    "kernelphase",
];

fn named(word: &str) -> Option<u32> {
    let w = word.to_ascii_lowercase();
    if let Some(i) = NAMES.iter().position(|n| *n == w) {
        return Some(1 << i);
    }
    Some(match w.as_str() {
        "channels" => CHANNEL_RECORDS,
        "default" => DEFAULT_MASK,
        "all" => ALL_MASK,
        // `0` is not among these: as a number it asks for nothing, which `resolve` reads as a
        // mistake; the words say it on purpose.
        "none" | "off" => 0,
        "api" => GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH,
        "proxy" => PROXY_OP | PROXY_STEP | PROXY_CTRL,
        "ce" => CE_COLL | CE_SYNC | CE_BATCH,
        _ => {
            let n = if let Some(hex) = w.strip_prefix("0x") {
                u32::from_str_radix(hex, 16).ok()?
            } else {
                w.parse::<u32>().ok()?
            };
            n & ALL_MASK
        }
    })
}

/// Parses a `NCCLSHIM_PROFILE` value. Returns the mask and the words it did not understand.
pub fn parse(spec: &str) -> (u32, Vec<String>) {
    let mut mask = 0u32;
    let mut unknown = Vec::new();
    let mut any = false;
    for raw in spec.split(SEPARATORS) {
        let word = raw.trim();
        if word.is_empty() {
            continue;
        }
        let (remove, name) = match word.strip_prefix(['-', '^']) {
            Some(rest) => (true, rest),
            None => (false, word),
        };
        match named(name) {
            Some(bits) if remove => mask &= !bits,
            Some(bits) => {
                mask |= bits;
                any = true;
            }
            None => unknown.push(word.to_owned()),
        }
    }
    if !any && unknown.is_empty() && spec.trim().is_empty() {
        mask = DEFAULT_MASK;
    }
    (close(mask), unknown)
}

/// Adds the parents an asked-for event needs to be useful: GPU time of a KernelCh is
/// attributed through its Coll/P2p parent, a ProxyStep through its ProxyOp, and so on.
pub fn close(mut mask: u32) -> u32 {
    if mask & KERNEL_PHASE != 0 {
        // NCCL 2.32 turns KernelCh on for KernelPhase too.
        mask |= KERNEL_CH;
    }
    if mask & NET_PLUGIN != 0 {
        mask |= PROXY_STEP;
    }
    if mask & PROXY_STEP != 0 {
        mask |= PROXY_OP;
    }
    if mask & (KERNEL_CH | PROXY_OP) != 0 {
        mask |= COLL | P2P;
    }
    if mask & (CE_SYNC | CE_BATCH) != 0 {
        mask |= CE_COLL;
    }
    mask
}

/// The mask to use for a `NCCLSHIM_PROFILE` value (`None` or blank: unset), and the one line to
/// print when the value could not be followed as written. The profiler is never turned off by
/// accident: a value that names no event types (`,,,`), only unknown ones (`banana`) or ends up
/// empty without saying `none`/`off` (`0`, `-1`, `-coll`) gives the default; unknown words next
/// to known ones are dropped. Every such line names the variable, the value and what is profiled.
pub fn resolve(raw: Option<&str>) -> (u32, Option<String>) {
    let Some(raw) = raw.filter(|v| !v.trim().is_empty()) else {
        return (DEFAULT_MASK, None);
    };
    let var = ncclshim_dump::settings::PROFILE.name;
    let shown = ncclshim_dump::settings::shown(raw);
    let default_used = |problem: String| {
        let line = format!(
            "ncclshim: {var}={shown} {problem}; using the default {}\n",
            describe(DEFAULT_MASK)
        );
        (DEFAULT_MASK, Some(line))
    };
    let (mask, unknown) = parse(raw);
    let says_none = raw
        .split(SEPARATORS)
        .any(|w| matches!(w.trim().to_ascii_lowercase().as_str(), "none" | "off"));
    if mask == 0 && !says_none {
        return default_used(if !unknown.is_empty() {
            format!("has no known event name ({})", shown_list(&unknown))
        } else if raw.split(SEPARATORS).all(|w| w.trim().is_empty()) {
            "names no event types".to_owned()
        } else {
            "selects no event types (`none` turns profiling off)".to_owned()
        });
    }
    if unknown.is_empty() {
        return (mask, None);
    }
    let line = format!(
        "ncclshim: {var}={shown}: ignoring unknown event name(s) {}; using {}\n",
        shown_list(&unknown),
        describe_or_none(mask)
    );
    (mask, Some(line))
}

/// The words between these are event names.
const SEPARATORS: [char; 5] = [',', '|', '+', ' ', ';'];

fn shown_list(words: &[String]) -> String {
    ncclshim_dump::settings::shown(&words.join(","))
}

fn describe_or_none(mask: u32) -> String {
    match describe(mask) {
        d if d.is_empty() => "none".to_owned(),
        d => d,
    }
}

/// The mask for this process, from the environment (see [`resolve`]).
pub fn from_env() -> (u32, Option<String>) {
    let raw = std::env::var_os(ncclshim_dump::settings::PROFILE.name)
        .map(|v| v.to_string_lossy().into_owned());
    resolve(raw.as_deref())
}

/// Names of the bits in `mask`, for messages and the README.
pub fn describe(mask: u32) -> String {
    let mut names: Vec<&str> = (0..16)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| NAMES[i])
        .collect();
    if mask & CHANNEL_RECORDS != 0 {
        names.push("channels");
    }
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_empty_give_coll_p2p_kernelch() {
        assert_eq!(parse("").0, DEFAULT_MASK);
        assert_eq!(parse("default").0, DEFAULT_MASK);
        assert_eq!(describe(DEFAULT_MASK), "coll,p2p,kernelch");
    }

    #[test]
    fn names_lists_numbers_and_removal() {
        assert_eq!(parse("coll").0, COLL);
        assert_eq!(parse("Coll, P2P").0, COLL | P2P);
        assert_eq!(parse("all").0, ALL_MASK);
        assert_eq!(
            parse("all,-proxystep,-netplugin").0,
            ALL_MASK & !(PROXY_STEP | NET_PLUGIN)
        );
        assert_eq!(parse("0x3").0, GROUP | COLL);
        assert_eq!(parse("none").0, 0);
        assert_eq!(parse("0").0, 0);
        assert_eq!(
            parse("api").0,
            GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH
        );
        let (m, bad) = parse("coll,bogus");
        assert_eq!(m, COLL);
        assert_eq!(bad, vec!["bogus".to_owned()]);
    }

    /// Issue 22 item 7: `-1`, `0`, `,,,` turned profiling off without a word and `banana`
    /// warned with an empty list. Each now gives the default and one line saying so.
    #[test]
    fn values_that_select_nothing_by_accident_use_the_default_and_say_so() {
        let d = "using the default coll,p2p,kernelch\n";
        for (raw, problem) in [
            ("-1", "selects no event types (`none` turns profiling off)"),
            ("0", "selects no event types (`none` turns profiling off)"),
            (
                "-coll",
                "selects no event types (`none` turns profiling off)",
            ),
            (
                "0x100000",
                "selects no event types (`none` turns profiling off)",
            ),
            (",,,", "names no event types"),
            ("banana", "has no known event name (banana)"),
            ("banana,-coll", "has no known event name (banana)"),
        ] {
            assert_eq!(
                resolve(Some(raw)),
                (
                    DEFAULT_MASK,
                    Some(format!("ncclshim: NCCLSHIM_PROFILE={raw} {problem}; {d}"))
                ),
                "{raw}"
            );
        }
    }

    #[test]
    fn deliberate_values_are_followed_quietly() {
        assert_eq!(resolve(None), (DEFAULT_MASK, None));
        assert_eq!(resolve(Some("  ")), (DEFAULT_MASK, None));
        assert_eq!(resolve(Some("none")), (0, None));
        assert_eq!(resolve(Some("OFF")), (0, None));
        assert_eq!(resolve(Some("coll")), (COLL, None));
        assert_eq!(resolve(Some("all,-channels")), (EVENT_BITS, None));
        assert_eq!(
            resolve(Some("coll,banana")),
            (
                COLL,
                Some(
                    "ncclshim: NCCLSHIM_PROFILE=coll,banana: ignoring unknown event name(s) banana; using coll\n"
                        .into()
                )
            )
        );
        assert_eq!(
            resolve(Some("none,banana")).1.as_deref(),
            Some("ncclshim: NCCLSHIM_PROFILE=none,banana: ignoring unknown event name(s) banana; using none\n")
        );
    }

    proptest::proptest! {
        /// Whatever the value, one line at most, on one line, and a mask NCCL can be given.
        #[test]
        fn any_value_resolves_without_panicking(raw in "\\PC{0,40}|[-,0-9a-z|+; ]{0,30}") {
            let (mask, line) = resolve(Some(&raw));
            proptest::prop_assert_eq!(mask & !ALL_MASK, 0);
            if let Some(line) = line {
                proptest::prop_assert_eq!(line.matches('\n').count(), 1);
                proptest::prop_assert!(line.starts_with("ncclshim: NCCLSHIM_PROFILE="));
            }
        }
    }

    #[test]
    fn channels_is_a_plugin_option_that_nccl_never_sees() {
        let (m, bad) = parse("default,channels");
        assert!(bad.is_empty());
        assert_eq!(m, DEFAULT_MASK | CHANNEL_RECORDS);
        assert_eq!(describe(m), "coll,p2p,kernelch,channels");
        assert_ne!(parse("all").0 & CHANNEL_RECORDS, 0);
        assert_eq!(parse("all,-channels").0, EVENT_BITS);
        for abi in 1..=7 {
            assert_eq!(crate::abi::event::supported(abi) & CHANNEL_RECORDS, 0);
        }
    }

    #[test]
    fn descendants_bring_their_parents() {
        assert_eq!(parse("kernelch").0, KERNEL_CH | COLL | P2P);
        assert_eq!(
            parse("netplugin").0,
            NET_PLUGIN | PROXY_STEP | PROXY_OP | COLL | P2P
        );
        assert_eq!(parse("kernelphase").0 & KERNEL_CH, KERNEL_CH);
        assert_eq!(parse("cesync").0, CE_SYNC | CE_COLL);
    }
}
