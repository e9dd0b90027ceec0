//! Why a command produced no report, as one typed value: the line for stderr and the
//! `{"error": {...}}` object of `--json` (`docs/schema/error.schema.json`). At the bottom of the
//! crate: the job directory's reading makes these, and the commands above it print them.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A file that could not be read as a dump.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub error: String,
}

/// Why a command produced no report: one line on stderr, and with `--json` the object
/// `{"error": {...}}` on stdout (`docs/schema/error.schema.json`), so that a program reading
/// the JSON never has to parse stderr.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub kind: ToolErrorKind,
    /// One line, the same as on stderr.
    pub message: String,
    /// The file or directory concerned, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The files that could not be read (`no_readable_dumps`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

/// The `kind` of a [`ToolError`] (stable names, part of the JSON contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// The path given is missing or is not a directory.
    NotADirectory,
    /// The directory could not be listed (permissions).
    CannotList,
    /// The directory holds no `*.ncclshim` file.
    NoDumps,
    /// Every dump file failed to read (`problems` says why, per file).
    NoReadableDumps,
    /// Anything else (writing the output, an unexpected failure).
    Internal,
}

impl ToolError {
    pub fn new(kind: ToolErrorKind, path: &Path, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            path: Some(path.display().to_string()),
            problems: Vec::new(),
        }
    }

    /// The `--json` form of any error: a [`ToolError`] as is, anything else as `internal`.
    pub fn from_anyhow(e: &anyhow::Error) -> Self {
        match e.downcast_ref::<ToolError>() {
            Some(t) => t.clone(),
            None => Self {
                kind: ToolErrorKind::Internal,
                message: format!("{e:#}"),
                path: None,
                problems: Vec::new(),
            },
        }
    }

    /// `{"error": {...}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "error": self })
    }
}
