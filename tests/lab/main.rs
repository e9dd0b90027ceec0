//! The scenario lab: every file in `tests/scenarios/` is a failure (or a healthy job) replayed
//! through the real capture path — real processes on simulated hosts (Linux namespaces) under
//! the real preloaded shim, NCCL played by a scripted test double or the real PyPI libnccl —
//! and judged on what `ncclshim report --json` concludes. `docs/scenarios.md` is generated
//! from the outcomes (`UPDATE_SCENARIOS=1 cargo test -p ncclshim-integration-tests --test lab`)
//! and checked for drift. Needs root (namespaces); without it, says so and skips.

mod cases;
mod catalog;
mod conformance;
mod contract;
mod golden;
mod hosts;
mod judge;
mod properties;
mod runner;
mod scenario;
mod script;
mod table;
// Perfetto's importer's rules (test support shared with the trace crate and the CLI's tests).
#[allow(dead_code)]
#[path = "../support/trace_validate.rs"]
mod trace_validate;

use scenario::Scenario;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every scenario file, by name, sorted.
fn scenarios() -> Vec<(String, Scenario)> {
    let dir = root().join("tests/scenarios");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, Scenario::load(&p).unwrap_or_else(|e| panic!("{e}")))
        })
        .collect()
}

/// The case collections' expectations (`tests/scenarios/*expectations.json`), by case id.
fn case_expectations() -> std::collections::BTreeMap<String, cases::CaseExpect> {
    cases::load_all(&root().join("tests/scenarios")).unwrap_or_else(|e| panic!("{e}"))
}

/// A scenario's case check: its case's expectation and the NCCL texts its scripts play.
fn case_check(
    s: &Scenario,
    all: &std::collections::BTreeMap<String, cases::CaseExpect>,
) -> Option<cases::CaseCheck> {
    let id = s.expect.case.as_ref()?;
    Some(cases::CaseCheck {
        expect: all
            .get(id)
            .unwrap_or_else(|| panic!("case {id} is in no tests/scenarios/*expectations.json"))
            .clone(),
        nccl_texts: s.error_texts(),
    })
}

#[test]
fn every_scenario_file_parses() {
    assert!(!scenarios().is_empty());
    let all = case_expectations();
    for (name, s) in scenarios() {
        if let Some(c) = &s.expect.case {
            assert!(all.contains_key(c), "{name}: case {c} has no expectation");
        }
    }
}

/// `docs/catalog.md` says, for every catalog case, which scenario proves it or why none can; it
/// is generated from the scenarios, so a case loses its row's proof the moment its scenario goes.
#[test]
fn catalog_table_is_current() {
    let text = std::fs::read_to_string(root().join("tests/lab/catalog.toml")).unwrap();
    let cat = catalog::load(&text).unwrap();
    assert_eq!(cat.cases.len(), 35, "the catalog has cases C01..C35");
    let doc = catalog::render(&cat, &scenarios()).unwrap_or_else(|p| panic!("{}", p.join("\n")));
    let path = root().join("docs/catalog.md");
    if std::env::var_os("UPDATE_SCENARIOS").is_some() {
        std::fs::write(&path, &doc).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == doc,
        "{} is out of date: regenerate with `UPDATE_SCENARIOS=1 cargo test -p ncclshim-integration-tests --test lab catalog_table_is_current`",
        path.display()
    );
    // The README carries the same table between markers, links relative to the root.
    let table = catalog::render_table(&cat, &scenarios(), "").unwrap();
    let readme_path = root().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let (begin, end) = (
        "<!-- catalog-table:begin -->\n",
        "<!-- catalog-table:end -->",
    );
    let start = readme
        .find(begin)
        .expect("README.md has the catalog-table markers")
        + begin.len();
    let stop = readme[start..]
        .find(end)
        .expect("README.md closes the catalog table")
        + start;
    if std::env::var_os("UPDATE_SCENARIOS").is_some() {
        let updated = format!("{}{table}{}", &readme[..start], &readme[stop..]);
        std::fs::write(&readme_path, updated).unwrap();
    } else {
        assert!(
            readme[start..stop] == table,
            "README.md's catalog table is out of date: regenerate with `UPDATE_SCENARIOS=1 cargo test -p ncclshim-integration-tests --test lab catalog_table_is_current`"
        );
    }
    // Every finding the table names is documented.
    let documented = std::fs::read_to_string(root().join("docs/report-json.md")).unwrap();
    let finding_column = doc
        .lines()
        .filter(|l| l.starts_with("| C"))
        .filter_map(|l| l.split('|').nth(3));
    for id in finding_column.flat_map(|c| c.split('`').skip(1).step_by(2)) {
        assert!(
            documented.contains(&format!("`{id}`")) || id == "none",
            "docs/catalog.md names {id}, which docs/report-json.md does not document"
        );
    }
}

#[test]
fn catalog_table_refuses_a_case_without_proof_or_reason() {
    let cat = catalog::load("[cases]\nC01 = \"x\"\n").unwrap();
    let err = catalog::render(&cat, &[]).unwrap_err();
    assert!(err[0].contains("C01 has no scenario"), "{err:?}");
}

/// Grouping over generated jobs (tests/lab/properties.rs): the failing rank or host is named,
/// and findings do not grow with the number of ranks.
#[test]
fn grouping_property() {
    if let Some(why) = hosts::unavailable() {
        eprintln!("grouping property: SKIPPED: {why}");
        return;
    }
    // Its own directory: the lab test builds its kit into target/lab at the same time.
    let work = root().join("target/lab-properties");
    let kit = runner::Kit::build(&root(), &work.join("bin"));
    let failures = properties::grouping(&kit, &work);
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The outcome of one scenario, as the table shows it.
pub enum Outcome {
    Pass,
    Pending(String),
}

#[test]
fn scenario_lab() {
    // LAB_ONLY=name,name runs a subset (while writing a scenario); a name ending in `*` is a
    // prefix (`LAB_ONLY='ho-*'`). The table is then not checked.
    let only: Option<Vec<String>> = std::env::var("LAB_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let selected = |n: &str| {
        only.as_ref().is_none_or(|o| {
            o.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => n.starts_with(prefix),
                None => p == n,
            })
        })
    };
    let all: Vec<(String, Scenario)> = scenarios()
        .into_iter()
        .filter(|(n, _)| selected(n))
        .collect();
    let case_expects = case_expectations();
    if let Some(why) = hosts::unavailable() {
        eprintln!(
            "scenario lab: SKIPPED all {} namespace scenarios: {why}",
            all.len()
        );
        return;
    }
    let work = root().join("target/lab");
    let kit = runner::Kit::build(&root(), &work.join("bin"));
    // Longest first, so the long job overlaps the rest.
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(all[i].1.launcher.timeout_ms));
    let queue = Mutex::new(order);
    // A scenario's index, its run, and the damaged-evidence property's failure and control count.
    type Done = (usize, Result<runner::Ran, String>, (Option<String>, usize));
    let results: Mutex<Vec<Done>> = Mutex::new(Vec::new());
    let workers = std::env::var("LAB_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| loop {
                let Some(i) = queue.lock().unwrap().pop() else {
                    return;
                };
                let (name, s) = &all[i];
                let r = runner::run(&kit, s, &work.join(name));
                // The report contract over damaged copies of this scenario's real dumps.
                let props = match &r {
                    Ok(ran) => properties::damaged_evidence(&kit.cli, name, ran),
                    Err(_) => (None, 0),
                };
                results.lock().unwrap().push((i, r, props));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, ..)| *i);

    let mut failures = Vec::new();
    let mut outcomes = Vec::new();
    let mut controls = 0;
    let mut goldens = Vec::new();
    let mut property_controls = 0;
    for (i, r, (property, pc)) in results {
        let (name, s) = &all[i];
        let known_gap = properties::KNOWN_GAPS.iter().find(|(n, _)| n == name);
        match (property, known_gap) {
            (Some(broken), Some((_, gap))) => {
                eprintln!("scenario lab: {name}: damaged-evidence property pending (known engine gap: {gap}): {broken}")
            }
            (Some(broken), None) => failures.push(broken),
            (None, Some(_)) => eprintln!(
                "scenario lab: {name}: the damaged-evidence property now holds: remove its entry from properties::KNOWN_GAPS"
            ),
            (None, None) => {}
        }
        property_controls += pc;
        let ran = match r {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: could not run: {e}"));
                outcomes.push((
                    name.clone(),
                    s.clone(),
                    Outcome::Pending(format!("could not run: {e}")),
                ));
                continue;
            }
        };
        // The report contract, the JSON schema and a valid trace hold for every report,
        // pending scenarios included.
        let mut broken = contract::violations(&ran.report);
        broken.extend(conformance::violations(
            &root(),
            &kit.cli,
            &ran.dir.join("dumps"),
            &ran.report,
        ));
        let contract_gap = contract::KNOWN_GAPS
            .iter()
            .find(|(n, _)| n == name && s.pending.is_some());
        match (broken.is_empty(), contract_gap) {
            (false, Some((_, gap))) => eprintln!(
                "scenario lab: {name}: report contract pending (known engine gap: {gap}): {}",
                broken.join("; ")
            ),
            (false, None) => failures.push(format!(
                "{name}: report contract: {}\n    kept: {}",
                broken.join("; "),
                ran.dir.display()
            )),
            (true, Some(_)) => eprintln!(
                "scenario lab: {name}: the report contract now holds: remove its entry from contract::KNOWN_GAPS"
            ),
            (true, None) => {}
        }
        let case = case_check(s, &case_expects);
        let mut verdict = judge::judge(&s.expect, &ran.report);
        if let Some(c) = &case {
            let misses = cases::check(c, &ran.report, ran.exit);
            if !misses.is_empty() {
                let mut all = verdict.err().unwrap_or_default();
                all.extend(misses);
                verdict = Err(all);
            }
        }
        match (&s.pending, verdict) {
            (None, Ok(())) => {
                for (what, e, rep) in judge::mutations(&s.expect, &ran.report) {
                    controls += 1;
                    if judge::judge(&e, &rep).is_ok() {
                        failures.push(format!(
                            "{name}: negative control ({}) : the judge accepted {what}",
                            s.family
                        ));
                    }
                }
                for (what, c, rep, exit) in
                    case.iter().flat_map(|c| cases::mutations(c, &ran.report))
                {
                    controls += 1;
                    if cases::check(&c, &rep, exit).is_empty() {
                        failures.push(format!(
                            "{name}: negative control ({}) : the case judge accepted {what}",
                            c.expect.id
                        ));
                    }
                }
                if s.golden {
                    goldens.push((name.clone(), golden::redact(&ran.report, &ran.dir)));
                }
                // LAB_KEEP=1 keeps every scenario's directory (dumps, report) for a look.
                if broken.is_empty() && std::env::var_os("LAB_KEEP").is_none() {
                    let _ = std::fs::remove_dir_all(&ran.dir);
                }
                outcomes.push((name.clone(), s.clone(), Outcome::Pass));
            }
            (None, Err(misses)) => {
                failures.push(format!(
                    "{name}: {}\n    kept: {} (report.json, scripts, rank output; scenario tests/scenarios/{name}.toml)",
                    misses.join("\n    "),
                    ran.dir.display()
                ));
                outcomes.push((name.clone(), s.clone(), Outcome::Pending("FAILING".into())));
            }
            (Some(why), Err(misses)) => {
                eprintln!(
                    "scenario lab: {name} skipped (pending: {why}): {}",
                    misses.join("; ")
                );
                outcomes.push((name.clone(), s.clone(), Outcome::Pending(why.clone())));
            }
            (Some(why), Ok(())) => failures.push(format!(
                "{name} now passes but is marked pending ({why}): remove its `pending` line"
            )),
        }
    }
    eprintln!(
        "scenario lab: {} scenarios, {} negative controls, {} damaged-evidence property controls",
        outcomes.len(),
        controls,
        property_controls
    );
    if !outcomes.is_empty() && property_controls == 0 {
        failures.push("the damaged-evidence property rejected no doctored report".into());
    }
    let doc = table::render(&outcomes);
    let path = root().join("docs/scenarios.md");
    if std::env::var_os("UPDATE_SCENARIOS").is_some() {
        std::fs::write(&path, &doc).unwrap();
    } else if failures.is_empty() && only.is_none() {
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current != doc {
            failures.push(format!(
                "{} is out of date: regenerate with `UPDATE_SCENARIOS=1 cargo test -p ncclshim-integration-tests --test lab`",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    // After the verdicts, so a wrong diagnosis reads as one rather than as a snapshot diff.
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for (name, report) in &goldens {
            insta::assert_json_snapshot!(name.as_str(), report);
        }
    });
}
