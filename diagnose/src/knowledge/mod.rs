//! What ncclshim knows about NCCL, CUDA and the systems around them, as data with sources.
//!
//! Every fact the diagnosis or `doctor` relies on (NCCL's message formats and what they mean,
//! known bugs and behaviour changes per version, CUDA / errno / ibverbs codes, launcher variables,
//! thresholds) lives in a TOML file under `diagnose/knowledge/`, embedded at build time and
//! parsed once, on first use. Each family has its own file and its own typed module here; rules,
//! `doctor` and the report read the same entries, so a threshold or a version fact exists once.
//!
//! A file that does not parse or validate is a build defect, not a user error: the tests parse
//! every family (`cargo test`), so a malformed entry never ships.

pub mod hardware;
pub mod messages;
pub mod sockets;

use serde::de::DeserializeOwned;

/// Parses one embedded knowledge file. `name` is the file's name under `knowledge/`, for the
/// message of the panic a malformed file produces (caught by the tests before it can ship).
pub fn parse<T: DeserializeOwned>(name: &str, text: &str) -> T {
    match toml::from_str(text) {
        Ok(v) => v,
        Err(e) => panic!("diagnose/knowledge/{name} is malformed: {e}"),
    }
}

pub mod bugs;
pub mod codes;
pub mod driver_paths;
pub mod flight_recorder;
pub mod fr_writers;
pub mod launchers;
pub mod profiler;
pub mod pytorch_backends;
pub mod references;
#[cfg(test)]
mod reworded;
pub mod static_nccl;
pub mod thresholds;
pub mod visible_devices;
