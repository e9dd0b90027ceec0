//! `libncclshim.so`: loaded with `LD_PRELOAD`, it interposes NCCL's API ([`nccl`]) and the CUDA
//! driver's IPC / cuMem calls that NCCL reaches through function pointers ([`driver`]), and
//! records every call into a crash-safe dump ([`runtime`]). It also interposes `exit`,
//! `_exit` and `_Exit` ([`exit`]) so that a dump says how its process ended, and with which status.
//!
//! The shim is inert until the first NCCL (or watched driver) event: no file, no thread, no
//! signal handler (the fatal-signal handlers of [`signals`] are chained in at that event). It never changes what NCCL or the driver return.
//!
//! The layers, each importing only those below it (`shim/tests/import_layers.rs` keeps it so):
//! - [`runtime`]: the recorder and the per-thread state every call runs with;
//! - [`symbols`]: the `dlsym` trampoline and the real `dlsym`;
//! - [`nccl`] and [`driver`], siblings that never import each other; [`signals`] and [`exit`];
//! - this file, the only place that names them all: it hands the `dlsym` trampoline its two
//!   deciders and registers the once-per-dump setup with the runtime.

pub mod driver;
pub mod exit;
pub mod nccl;
pub mod runtime;
pub mod signals;
pub mod symbols;

use ncclshim_dump::{Recorder, RingWriter};

// The `dlsym` export: `cu*` lookups go to the driver layer, `nc*` ones (NCCL through a library
// handle) to the NCCL layer.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
symbols::dlsym::dlsym_export!(cu => driver::lookup::decide_cu, nc => nccl::handles::decide);

/// The once-per-dump-file setup, run by the `record` call that created the file: chain the
/// fatal-signal handlers in, take the first snapshots, flush the driver lookup counts.
fn on_dump_created(recorder: &'static Recorder, ring: &RingWriter) {
    signals::install(recorder);
    nccl::on_recorder_created(recorder, ring);
    driver::on_recorder_created(recorder);
}

/// Library constructor: registers [`on_dump_created`] and resolves a relative `NCCLSHIM_DIR`
/// against the working directory the process starts in (no file, thread, handler or output).
/// Catches any panic: nothing may unwind into the loader.
extern "C" fn register_layers() {
    let _ = std::panic::catch_unwind(|| {
        ncclshim_dump::config::resolve_dir_at_load();
        runtime::recorder::register_setup(on_dump_created);
    });
}

#[used]
// SAFETY: `.init_array` holds plain `extern "C" fn()` constructors the loader calls once at
// load time; `register_layers` has that signature and only stores a function pointer.
#[unsafe(link_section = ".init_array")]
static REGISTER_LAYERS: extern "C" fn() = register_layers;
