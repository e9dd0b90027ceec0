//! The `ncclshim` commands' own modules, under the binary (`main.rs`): the raw `dump` view
//! ([`dumpjson`]), the `run` launcher ([`run`], with the
//! library directories it preloads from, [`libdirs`], the terminal it hands the job,
//! [`jobcontrol`], and its notice of failed calls in a job that exited 0, [`caught`]), the text of `doctor` ([`doctor`]; its checks are `ncclshim_doctor`'s),
//! the per-node Prometheus endpoint of `exporter` ([`exporter`]), and the allocator tuning of the process ([`heap`]). What `report` says is the diagnosis
//! library's (`ncclshim_diagnose`), what `trace` writes the trace builder's (`ncclshim_trace`); this crate parses arguments and prints.

pub mod caught;
pub mod doctor;
pub mod dumpjson;
pub mod exporter;
pub mod heap;
pub mod jobcontrol;
pub mod libdirs;
pub mod run;
