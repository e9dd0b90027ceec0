//! Every lab report also keeps the documented JSON contract (`docs/schema/report.schema.json`),
//! and every lab job's trace is valid for Perfetto's JSON importer (the rules checked by
//! `tests/support/trace_validate.rs`) and draws every call in flight at the end with a length
//! (killed and hung ranks: `in_flight_slices_have_length`): the scenario lab is the widest set of real captures the
//! tests have, so the schema and trace tests run over it too.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

fn report_schema(root: &Path) -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let p = root.join("docs/schema/report.schema.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
        jsonschema::draft202012::new(&schema).expect("a valid schema")
    })
}

/// What is wrong with `report` against the schema, and with the trace `cli` makes of `dumps`.
pub fn violations(root: &Path, cli: &Path, dumps: &Path, report: &Value) -> Vec<String> {
    let mut out: Vec<String> = report_schema(root)
        .iter_errors(report)
        .map(|e| format!("report schema: {e} at {}", e.instance_path()))
        .collect();
    let trace = dumps.with_file_name("trace.json");
    match Command::new(cli)
        .arg("trace")
        .arg(dumps)
        .arg("-o")
        .arg(&trace)
        .output()
    {
        Ok(o) if o.status.success() => {
            let parsed = std::fs::read_to_string(&trace)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()));
            match parsed {
                Ok(v) => {
                    if let Err(es) = crate::trace_validate::validate(&v) {
                        out.extend(es.into_iter().take(5).map(|e| format!("trace: {e}")));
                    }
                    // A hang is drawn as a hang: no in-flight slice of length 0.
                    let empty = crate::trace_validate::in_flight_slices_have_length(
                        &v,
                        ncclshim_trace::IN_FLIGHT_STATE,
                    );
                    out.extend(empty.into_iter().take(5).map(|e| format!("trace: {e}")));
                }
                Err(e) => out.push(format!("trace: not JSON: {e}")),
            }
        }
        Ok(o) => out.push(format!(
            "trace: `ncclshim trace` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => out.push(format!("trace: cannot run {}: {e}", cli.display())),
    }
    out
}
