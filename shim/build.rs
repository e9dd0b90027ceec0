//! Link flags for libncclshim.so. `-Bsymbolic-functions` binds the shim's calls to its own
//! functions inside the shim, so nothing it calls internally can be interposed back into a
//! hook (NCCL's own internal calls still reach our exports through its PLT, as they should).
//!
//! Under `cargo zigbuild` (the low-glibc release build) zig's linker does not know
//! `-Bsymbolic-functions`; `-Bsymbolic` is used there. The shim exports no data objects, so
//! binding data symbolically too changes nothing.
fn main() {
    let zig = std::env::vars().any(|(k, v)| {
        k.starts_with("CARGO_ZIGBUILD")
            || (k.starts_with("CARGO_TARGET_") && k.ends_with("_LINKER") && v.contains("zig"))
    });
    let flag = if zig {
        "-Wl,-Bsymbolic"
    } else {
        "-Wl,-Bsymbolic-functions"
    };
    println!("cargo:rustc-cdylib-link-arg={flag}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CARGO_ZIGBUILD_ZIG_PATH");
}
