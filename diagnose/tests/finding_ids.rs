//! Finding ids are declared once (`diagnose/src/finding/registry.rs`) and used as typed handles
//! (`Finding::new(&registry::DUPLICATE_GPU, ...)`): no file of `diagnose/src` other than the
//! registry spells a declared id as a string literal, and no code outside the tests builds a
//! family member's id (`known-...`, `invariant-...`, `nccl-message-...`) by hand.
//!
//! Read as text: every `"..."` literal of every file. A literal that is also an id of the
//! message knowledge (an entry or a cause of `knowledge/messages.toml`, a namespace of its own
//! that names some causes as the findings they lead to) is that knowledge's id, not a finding's.

use ncclshim_diagnose::finding::registry;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The string literals of `code` (plain `"..."`, no escapes needed for ids).
fn literals(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(start) = rest.find('"') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('"') else { break };
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    out
}

/// The ids of the message knowledge: entries and their causes.
fn knowledge_ids() -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for e in &ncclshim_diagnose::knowledge::messages::messages().entries {
        ids.insert(e.id.clone());
        ids.extend(e.causes.iter().map(|c| c.id.clone()));
    }
    ids
}

#[test]
fn no_finding_id_is_spelt_outside_the_registry() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let registry_file = src.join("finding/registry.rs");
    let declared: BTreeSet<&str> = registry::DECLARED.iter().map(|d| d.id()).collect();
    assert!(
        declared.len() > 40,
        "the registry declares {} ids",
        declared.len()
    );
    let knowledge = knowledge_ids();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for path in files.iter().filter(|p| **p != registry_file) {
        let text = std::fs::read_to_string(path).expect("read source");
        let rel = path.strip_prefix(&src).unwrap().display().to_string();
        for lit in literals(&text) {
            if declared.contains(lit) && !knowledge.contains(lit) {
                found.push(format!("{rel}: \"{lit}\" (use its `registry::` handle)"));
            }
        }
        // Outside the tests, no member id is written by hand: `Family::member` makes it.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for lit in literals(code) {
            for family in registry::FAMILIES {
                let prefix = family.pattern().split('<').next().unwrap_or_default();
                if lit.starts_with(prefix) {
                    found.push(format!(
                        "{rel}: \"{lit}\" (a {} id: use `registry::...member`)",
                        family.pattern()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "finding ids spelt outside diagnose/src/finding/registry.rs:\n{}",
        found.join("\n")
    );
}

/// The scan itself finds a spelt id (a check that cannot fail proves nothing).
#[test]
fn the_scan_sees_a_literal() {
    let id = registry::DUPLICATE_GPU.id();
    let code = format!("let f = Finding::new(\"{id}\", None);");
    assert_eq!(literals(&code), vec![id]);
}
