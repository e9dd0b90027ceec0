//! The JSON contract, enforced: every `report --json` and `doctor --json` document the test
//! suite produces goes through [`check_report`] / [`check_doctor`], which hold it to the
//! schemas in `docs/schema/` (JSON Schema draft 2020-12). A field added to the output without
//! being added to the schema (and so to the documentation) fails the tests.
//!
//! Test support at the workspace root, `#[path]`-included by the CLI's integration tests
//! (`collector-cli/tests/support/mod.rs`) and the diagnosis' unit tests (`diagnose/src/rules`),
//! so that findings built in a rule's own test are held to the same contract.

use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

/// The schema file under `docs/schema/`, parsed.
pub fn schema(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/schema")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A validator for one branch of a schema's root `oneOf` (the document or the error object),
/// so that a failure names the offending field rather than "matches none of the branches".
fn branch(name: &str, def: &str) -> jsonschema::Validator {
    let mut s = schema(name);
    let root = s.as_object_mut().expect("schema is an object");
    root.remove("oneOf");
    root.insert("$ref".into(), Value::from(format!("#/$defs/{def}")));
    jsonschema::draft202012::new(&s).unwrap_or_else(|e| panic!("{name}: not a valid schema: {e}"))
}

struct Contract {
    whole: jsonschema::Validator,
    document: jsonschema::Validator,
    error: jsonschema::Validator,
}

fn contract(name: &str, document: &str) -> Contract {
    let whole = jsonschema::draft202012::new(&schema(name))
        .unwrap_or_else(|e| panic!("{name}: not a valid schema: {e}"));
    Contract {
        whole,
        document: branch(name, document),
        error: branch(name, "error_object"),
    }
}

fn check(c: &Contract, what: &str, v: &Value) {
    let detail = if v.get("error").is_some() {
        &c.error
    } else {
        &c.document
    };
    let errors: Vec<String> = detail
        .iter_errors(v)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty() && c.whole.is_valid(v),
        "{what} breaks its JSON contract (docs/schema/):\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(v).unwrap_or_default()
    );
}

/// Asserts `v` (a `report --json` document or its error object) matches
/// `docs/schema/report.schema.json`, and that every finding id in it is documented in
/// `docs/report-json.md`.
pub fn check_report(v: &Value) {
    static C: OnceLock<Contract> = OnceLock::new();
    static DOC: OnceLock<String> = OnceLock::new();
    check(
        C.get_or_init(|| contract("report.schema.json", "report")),
        "report --json",
        v,
    );
    let doc = DOC.get_or_init(|| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report-json.md");
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    });
    for f in v["findings"].as_array().into_iter().flatten() {
        let id = f["id"].as_str().unwrap_or_default();
        // Families of ids named by their data entry are listed once as `prefix<entry>`.
        let family = id
            .match_indices('-')
            .any(|(i, _)| doc.contains(&format!("| `{}<", &id[..=i])));
        assert!(
            doc.contains(&format!("| `{id}` |")) || family,
            "finding id `{id}` is not in the table of docs/report-json.md (\"Finding ids\")"
        );
    }
}

/// Asserts `v` (a `doctor --json` document or its error object) matches
/// `docs/schema/doctor.schema.json`.
pub fn check_doctor(v: &Value) {
    static C: OnceLock<Contract> = OnceLock::new();
    check(
        C.get_or_init(|| contract("doctor.schema.json", "doctor")),
        "doctor --json",
        v,
    );
}

/// Serializes a report, checks it against the contract and returns the JSON.
pub fn report_json(r: &impl serde::Serialize) -> Value {
    let v = serde_json::to_value(r).expect("a report serializes");
    check_report(&v);
    v
}
