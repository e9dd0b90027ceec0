//! The crate's modules import each other one way only: no circle between the files of `src/`
//! (read from their `crate::` / `super::` paths; see `tests/support/import_graph.rs`). The
//! diagnosis flows one way: model and Flight Recorder data -> story -> rules -> meta-rules ->
//! verdict -> report, over `finding` (what they all make and read) and `error` / `job_dir` (how
//! the job directory is read) at the bottom; a lower file that names an upper one is the first
//! sign that a later stage patches an earlier one's work.

#[path = "../../tests/support/import_graph.rs"]
mod import_graph;

#[test]
fn the_checker_finds_a_circle() {
    import_graph::self_check();
}

#[test]
fn no_import_circle_between_the_module_files_of_src() {
    import_graph::assert_no_circles(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}
