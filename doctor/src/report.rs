//! `doctor --json`: the checks and the facts they read, as one versioned object.

use crate::check::{job_would_fail, Check};
use crate::facts::Facts;
use serde::Serialize;

/// `doctor --json`: a stable, versioned object.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport<'a> {
    /// Bumped when a field changes meaning or goes away (new fields and checks are additive).
    pub format_version: u32,
    pub tool_version: &'static str,
    /// Whether a job started on this host would fail (some check is an error); the exit code is 1 then.
    pub job_would_fail: bool,
    pub checks: &'a [Check],
    pub facts: &'a Facts,
}

/// The `--json` format version of [`DoctorReport`].
pub const FORMAT_VERSION: u32 = 1;

impl<'a> DoctorReport<'a> {
    pub fn new(checks: &'a [Check], facts: &'a Facts) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            tool_version: env!("CARGO_PKG_VERSION"),
            job_would_fail: job_would_fail(checks),
            checks,
            facts,
        }
    }
}
