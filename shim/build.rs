//! Link flags for libncclshim.so. `-Bsymbolic-functions` binds the shim's calls to its own
//! functions inside the shim, so nothing it calls internally can be interposed back into a
//! hook (NCCL's own internal calls still reach our exports through its PLT, as they should).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rerun-if-changed=build.rs");
}
