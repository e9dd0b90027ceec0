//! The crate's modules import each other one way only: no circle between the files of `src/`
//! (read from their `crate::` / `super::` paths; see `tests/support/import_graph.rs`). The
//! diagnosis flows one way: model and Flight Recorder data -> story -> rules -> meta-rules ->
//! verdict -> report, over `finding` (what they all make and read) at the bottom; a lower file
//! that names an upper one is the first sign that a later stage patches an earlier one's work.

#[path = "../../tests/support/import_graph.rs"]
// `assert_no_circles` is the recorders' form; this crate filters the files being moved first.
#[allow(dead_code)]
mod import_graph;

use std::path::Path;

/// Files another change of issue 38 is moving (the per-node summaries read the job directory
/// through the crate root, `summary.rs`; the model's serial helpers, `model/serial.rs`): what
/// they import is not held to the layers yet. Everything else is, including what imports them.
const MOVING: &[&str] = &["summary.rs", "model/serial.rs"];

#[test]
fn the_checker_finds_a_circle() {
    import_graph::self_check();
}

#[test]
fn no_import_circle_between_the_module_files_of_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g = import_graph::graph(&src);
    assert!(g.len() > 50, "no imports read under {}", src.display());
    for m in MOVING {
        g.remove(*m);
    }
    let found = import_graph::circles(&g);
    assert!(
        found.is_empty(),
        "import circles between the module files of {} (a lower layer must not name an upper \
         one: move the shared piece down, or hand the result up as data):\n{}",
        src.display(),
        found.join("\n")
    );
}
