//! The user's choices about the analysis (`ncclshim report --stall-after`) and its instant.

/// Choices a user makes about the analysis (`ncclshim report --stall-after`), passed to the
/// rules that depend on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long the live ranks of a communicator must have recorded nothing before an operation
    /// that has not completed is called a hang ([`super::hang::stuck::DEFAULT_STALL_NS`] by default).
    pub stall_after_ns: u64,
    /// The time of the analysis (ns since the Unix epoch): the diagnosis is a pure function of
    /// the job and this instant, so a test can replay "read while running" and "read later".
    pub now_ns: u64,
}

impl Options {
    /// The default options at the instant `now_ns`.
    pub fn at(now_ns: u64) -> Self {
        Self {
            stall_after_ns: super::hang::stuck::DEFAULT_STALL_NS,
            now_ns,
        }
    }
}

impl Default for Options {
    /// The default options now: the one place the diagnosis reads the clock.
    fn default() -> Self {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self::at(now_ns)
    }
}
