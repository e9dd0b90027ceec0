//! The README's sample report is the real output: the block between `<!-- BEGIN real-report: …
//! -->` and `<!-- END real-report -->` must equal what the command named in the BEGIN marker
//! prints now (`ncclshim report` of a real capture kept in `tests/fixtures/real/`). After an
//! intended change to the report, regenerate it with
//! `UPDATE_README=1 cargo test -p collector-cli --test readme` and review the diff.

use std::path::Path;
use std::process::Command;

const BEGIN: &str = "<!-- BEGIN real-report: ";
const END: &str = "<!-- END real-report -->";

/// The README's block: the command after `ncclshim`, and the text between the markers.
fn block(readme: &str) -> (Vec<String>, std::ops::Range<usize>) {
    let start = readme
        .find(BEGIN)
        .expect("README has a real-report BEGIN marker");
    let line_end = start + readme[start..].find("-->\n").expect("BEGIN marker closes") + 4;
    let command = readme[start + BEGIN.len()..line_end - 4].trim();
    let args = command
        .strip_prefix("ncclshim ")
        .expect("the marker names an ncclshim command")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let end = readme[line_end..]
        .find(END)
        .map(|e| line_end + e)
        .expect("README has a real-report END marker");
    (args, line_end..end)
}

/// What the block must hold: the command as a user types it (without `--color never`, which
/// only keeps colour codes out of the file), then its output.
fn rendered(args: &[String], root: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(args)
        .current_dir(root)
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the README's example is a failure that was found: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--color" && *a != "never")
        .collect();
    format!(
        "```text\n$ ncclshim {}\n{}```\n",
        shown.join(" "),
        String::from_utf8(out.stdout).unwrap()
    )
}

#[test]
fn the_readme_shows_the_real_report() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (args, range) = block(&readme);
    let real = rendered(&args, &root);
    if std::env::var_os("UPDATE_README").is_some() {
        let mut updated = readme.clone();
        updated.replace_range(range, &real);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        readme[range].to_owned(),
        real,
        "README.md's sample report differs from the real output; \
         regenerate with `UPDATE_README=1 cargo test -p collector-cli --test readme`"
    );
}
