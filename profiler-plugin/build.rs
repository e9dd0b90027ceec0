//! Link flags for the cdylib NCCL loads.

fn main() {
    // NCCL dlcloses the plugin when its last communicator is finalized and dlopens it again for
    // the next one. Staying mapped keeps our statics (the recorder, its mapping, the per-comm
    // contexts that a shared proxy thread may still use) valid across that cycle and makes the
    // global init idempotent instead of repeated.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // Every symbol must resolve at link time. Besides catching a missing library, this is what
    // makes `no_panic` (src/hot.rs) bite in a shared object: its proof works by leaving an
    // undefined symbol behind when a panic is reachable, which a plain `-shared` link accepts.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,defs");
    println!("cargo:rerun-if-changed=build.rs");
}
