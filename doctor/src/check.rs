//! One check's result ([`Check`], [`Status`]) and the verdict over all of them.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Info,
    Warn,
    Error,
}

/// One check and its result. `id` is stable (one per check, whatever its outcome), `message`
/// says what was found, `values` holds what was measured, by name, for machines.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub id: &'static str,
    pub status: Status,
    pub message: String,
    pub values: BTreeMap<&'static str, serde_json::Value>,
    /// The same evidence, as lines for people.
    pub evidence: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<&'static str>,
}

impl Check {
    pub fn new(id: &'static str, status: Status, message: impl Into<String>) -> Self {
        Self {
            id,
            status,
            message: message.into(),
            values: BTreeMap::new(),
            evidence: Vec::new(),
            remedy: None,
            catalog: None,
        }
    }

    pub fn ok(id: &'static str, message: impl Into<String>) -> Self {
        Self::new(id, Status::Ok, message)
    }

    pub fn evidence(mut self, e: impl Into<String>) -> Self {
        self.evidence.push(e.into());
        self
    }

    pub fn value(mut self, k: &'static str, v: impl Serialize) -> Self {
        self.values.insert(
            k,
            serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
        );
        self
    }

    pub fn remedy(mut self, r: impl Into<String>) -> Self {
        self.remedy = Some(r.into());
        self
    }

    pub fn catalog(mut self, c: &'static str) -> Self {
        self.catalog = Some(c);
        self
    }
}

/// Whether some check says a job on this host would fail.
pub fn job_would_fail(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Error)
}
