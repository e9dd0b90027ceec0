//! Running the built `ncclshim` binary (Cargo's `CARGO_BIN_EXE_ncclshim`, so only for the
//! integration tests of this crate) the way a user does, and reading what it printed.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// `ncclshim report ARGS DIR`: (exit status, stdout, stderr). A report killed by a signal fails
/// the test: the CLI must always exit with a status.
pub fn report(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("report")
        .args(args)
        .arg(dir)
        .output()
        .expect("the ncclshim binary runs");
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("ncclshim report died: {:?}", out.status));
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ncclshim report --json [EXTRA] DIR`: (exit status, report, stderr); the report is held to
/// the JSON schema ([`super::schema::check_report`]).
pub fn report_json(dir: &Path, extra: &[&str]) -> (i32, Value, String) {
    let args: Vec<&str> = std::iter::once("--json")
        .chain(extra.iter().copied())
        .collect();
    let (code, stdout, stderr) = report(dir, &args);
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("report --json is not JSON ({e}):\n{stdout}\n{stderr}"));
    super::schema::check_report(&v);
    (code, v, stderr)
}
