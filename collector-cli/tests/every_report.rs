//! Every committed capture's report keeps the two promises a reader relies on: a job in which
//! something failed has a primary finding (a cause, or what failed first and which fact would
//! decide it), and the text report states no finding twice (the same finding on many ranks is
//! one finding with a rank list). Over the dump fixtures and every real GPU capture.

mod support;

use std::collections::BTreeSet;
use std::path::Path;

/// The promises, checked on one dump directory; the misses in words.
fn misses(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let (_, v, _) = support::cli::report_json(dir, &[]);
    let failures = v["failure_order"].as_array().map_or(0, Vec::len);
    let findings = v["findings"].as_array().cloned().unwrap_or_default();
    if failures > 0 && !findings.iter().any(|f| f["severity"] == "primary") {
        out.push(format!(
            "{}: {failures} failure(s) and no primary finding",
            dir.display()
        ));
    }
    for all in [false, true] {
        let args: &[&str] = if all {
            &["--color", "never", "--all"]
        } else {
            &["--color", "never"]
        };
        let (_, text, _) = support::cli::report(dir, args);
        let mut seen = BTreeSet::new();
        for l in text.lines().filter(|l| {
            ["PRIMARY ", "CONTRIBUTING ", "ADVISORY "]
                .iter()
                .any(|h| l.starts_with(h))
        }) {
            if !seen.insert(l.to_owned()) {
                out.push(format!(
                    "{}: the text report shows twice: {l}",
                    dir.display()
                ));
            }
        }
    }
    out
}

#[test]
fn every_fixture_report_has_a_primary_when_something_failed_and_no_finding_twice() {
    let mut all = Vec::new();
    for dir in support::captures::fixture_dirs() {
        all.extend(misses(&dir));
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[test]
fn every_real_gpu_capture_report_has_a_primary_when_something_failed_and_no_finding_twice() {
    let mut all = Vec::new();
    let mut cases = 0;
    for (capture, names) in support::captures::real_gpu_case_names() {
        for name in names {
            let (_guard, case) = support::captures::unpack_case(&capture, &name);
            let dumps = if case.join("dumps").is_dir() {
                case.join("dumps")
            } else {
                case
            };
            cases += 1;
            all.extend(misses(&dumps));
        }
    }
    assert!(cases >= 14, "only {cases} real GPU captures found");
    assert!(all.is_empty(), "{}", all.join("\n"));
}
