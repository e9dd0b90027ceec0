//! The crate's modules import each other one way only: no circle between the files of `src/`
//! (read from their `crate::` / `super::` paths; see `tests/support/import_graph.rs`).

// The checker's own test (`self_check`) runs in the shim's copy of this test.
#[allow(dead_code)]
#[path = "../../tests/support/import_graph.rs"]
mod import_graph;

#[test]
fn no_import_circle_between_the_module_files_of_src() {
    import_graph::assert_no_circles(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}
