//! The README's configuration table against the one definition of the `NCCLSHIM_*` variables
//! (`dump/src/settings.rs`): every variable documented with the same default and range, no row
//! for a variable the code does not define, and no `NCCLSHIM_*` name read anywhere in the
//! shipped sources that the definition lacks.

use ncclshim_dump::settings::SETTINGS;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The README table's rows: (variable, default, allowed).
fn readme_rows() -> Vec<(String, String, String)> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Configuration\n")
        .nth(1)
        .expect("README has a Configuration section");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| `NCCLSHIM_"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (
                cells[0].trim_matches('`').to_owned(),
                cells[1].to_owned(),
                cells[2].to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_readme_documents_every_variable_with_its_default_and_range() {
    let rows = readme_rows();
    for s in SETTINGS {
        let row = rows
            .iter()
            .find(|r| r.0 == s.name)
            .unwrap_or_else(|| panic!("README's configuration table lacks {}", s.name));
        assert_eq!(row.1, s.default, "{}: default", s.name);
        assert_eq!(row.2, s.allowed_text(), "{}: allowed values", s.name);
    }
    for row in &rows {
        assert!(
            SETTINGS.iter().any(|s| s.name == row.0),
            "README documents {}, which dump/src/settings.rs does not define",
            row.0
        );
    }
}

/// Every `NCCLSHIM_X` spelled in a file, `NCCLSHIM_` prefixes (no name after them) excluded.
fn names_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("NCCLSHIM_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..len].trim_end_matches('_');
        if name.len() > "NCCLSHIM".len() {
            out.push(name.to_owned());
        }
        rest = &tail[len..];
    }
    out
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            source_files(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "rs" || x == "py" || x == "sh")
        {
            out.push(p);
        }
    }
}

#[test]
fn every_variable_the_shipped_code_names_is_defined() {
    let root = repo_root();
    let mut files = Vec::new();
    // Shipped code only: tests and benches have their own harness variables.
    for dir in [
        "shim/src",
        "dump/src",
        "profiler-plugin/src",
        "host-facts/src",
        "format/src",
        "diagnose/src",
        "trace/src",
        "doctor/src",
        "collector-cli/src",
        "python",
    ] {
        if root.join(dir).is_dir() {
            source_files(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() > 20, "found the sources: {}", files.len());
    let mut seen = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for name in names_in(&text) {
            assert!(
                SETTINGS.iter().any(|s| s.name == name),
                "{} names {name}, which dump/src/settings.rs does not define",
                f.display()
            );
            seen.push(name);
        }
    }
    for s in SETTINGS {
        assert!(
            seen.iter().any(|n| n == s.name),
            "{} is defined but no shipped code names it",
            s.name
        );
    }
}

#[test]
fn names_are_found_in_text() {
    assert_eq!(
        names_in("`NCCLSHIM_RING_SLOTS=4`, \"NCCLSHIM_\", NCCLSHIM_X_."),
        ["NCCLSHIM_RING_SLOTS", "NCCLSHIM_X"]
    );
}
