//! Helpers shared by the integration tests (each test file says `mod support;`).
// Each test file uses the helpers it needs.
#![allow(dead_code)]

pub mod captures;
pub mod cli;
pub mod native;
pub mod procs;
#[path = "../../../tests/support/schema.rs"]
pub mod schema;
