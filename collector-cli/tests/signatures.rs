//! Signature corpus, in the style of syzkaller's report tests: every file under
//! `tests/signatures/` is a real NCCL error text (a log excerpt or ncclGetLastError's text, as
//! published in the GitHub issue or document its `# source:` line cites) with the message entry
//! (`knowledge/messages.toml`) it must be classified as, or `unexplained` when no entry may claim
//! it. The test classifies every file through the same path the report uses and lists every
//! mismatch at once.

use ncclshim_diagnose::knowledge::messages::classify;
use std::path::Path;

struct Case {
    name: String,
    source: String,
    expect: String,
    text: String,
}

fn cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/signatures");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tests/signatures") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "txt") {
            continue;
        }
        let raw = std::fs::read_to_string(&path).expect("read");
        let header = |key: &str| {
            raw.lines()
                .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let text: Vec<&str> = raw.lines().filter(|l| !l.starts_with("# ")).collect();
        out.push(Case {
            name: path.file_name().unwrap().to_string_lossy().into_owned(),
            source: header("source"),
            expect: header("expect"),
            text: text.join("\n"),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[test]
fn every_corpus_text_classifies_as_expected() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} corpus files", cases.len());
    let mut wrong = Vec::new();
    for c in &cases {
        assert!(
            c.source.starts_with("https://"),
            "{}: no source URL",
            c.name
        );
        assert!(
            !c.expect.is_empty() && !c.text.trim().is_empty(),
            "{}: malformed",
            c.name
        );
        let got = classify(&c.text).map_or("unexplained".to_owned(), |m| m.entry.id.clone());
        if got != c.expect {
            wrong.push(format!("{}: expected {}, got {got}", c.name, c.expect));
        }
    }
    let explained = cases.iter().filter(|c| c.expect != "unexplained").count();
    eprintln!("{} corpus texts, {explained} with an entry", cases.len());
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

#[test]
fn captured_values_are_typed() {
    // The address in a connect failure is a socket address the report can resolve.
    let c = cases()
        .into_iter()
        .find(|c| c.name == "net-connect-no-route.txt")
        .expect("corpus file");
    let m = classify(&c.text).expect("classified");
    assert_eq!(m.capture("addr"), Some("192.168.1.9<54263>"));
    assert_eq!(m.capture("errno_text"), Some("No route to host"));
}
