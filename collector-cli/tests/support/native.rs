//! Building and preloading native test programs: the repository root, the release shim, and the
//! C compiler, for the tests that run real processes under `LD_PRELOAD`.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The release shim when `scripts/setup.sh` built it (a 10-million-call job needs it), else
/// the one next to the test's binary.
pub fn shim_so() -> PathBuf {
    let rel = root().join("target/release/libncclshim.so");
    if rel.exists() {
        return rel;
    }
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libncclshim.so"),
        deps.parent().unwrap().join("libncclshim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libncclshim.so not built")
}

/// The project's venv with the Python packages the tests run against (`scripts/tools-venv.sh
/// --test`: nccl4py, prometheus-client, Open MPI's mpirun), made and installed on first use.
pub fn test_venv() -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("scripts/tools-venv.sh"))
        .arg("--test")
        .output()
        .expect("bash scripts/tools-venv.sh --test");
    assert!(
        out.status.success(),
        "scripts/tools-venv.sh --test failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let venv = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("the venv's directory")
        .trim()
        .to_string();
    PathBuf::from(venv)
}

/// Runs `cc` with `args`; a failure shows the compiler's output.
pub fn cc(args: &[&str]) {
    let o = Command::new("cc").args(args).output().expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Builds the NCCL TEST DOUBLE (`shim/tests/doubles/nccl_double.c`) as `dir/libnccl.so.2` (once)
/// and `program` (a `tests/c` source) linked to it.
pub fn build_against_double(dir: &Path, program: &str) -> PathBuf {
    let lib = dir.join("libnccl.so.2");
    if !lib.exists() {
        let double = root().join("shim/tests/doubles/nccl_double.c");
        cc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            lib.to_str().unwrap(),
            double.to_str().unwrap(),
        ]);
    }
    let prog = dir.join(program);
    let src = root().join(format!("tests/c/{program}.c"));
    cc(&[
        "-O2",
        "-pthread",
        "-o",
        prog.to_str().unwrap(),
        src.to_str().unwrap(),
        &format!("-L{}", dir.display()),
        "-l:libnccl.so.2",
        &format!("-Wl,-rpath,{}", dir.display()),
    ]);
    prog
}

/// The directory of the cu12 wheel's real libnccl.so.2, fetched once by
/// `scripts/fetch-nccl.sh`.
pub fn nccl_cu12_lib() -> PathBuf {
    let st = Command::new("bash")
        .arg(root().join("scripts/fetch-nccl.sh"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    root().join(".cache/nccl/cu12/lib")
}

/// `tests/c/nccl_fail.c` linked against the cu12 wheel's real libnccl ([`nccl_cu12_lib`]),
/// built as `out/nccl_fail`.
pub fn nccl_fail_program(out: &Path) -> PathBuf {
    nccl_program(out, "nccl_fail")
}

/// A real job of one rank: `nccl_fail uniqueid` under the shim (dumps in `dir`), whose
/// `ncclGetUniqueId` fails for real on a bad `NCCL_SOCKET_IFNAME`. `out` holds the program.
pub fn failed_unique_id_job(out: &Path, dir: &Path) {
    let o = Command::new(nccl_fail_program(out))
        .arg("uniqueid")
        .env("NCCL_SOCKET_IFNAME", "bad0")
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

/// `tests/c/<name>.c` linked against the cu12 wheel's real libnccl ([`nccl_cu12_lib`]), built
/// as `out/<name>`.
pub fn nccl_program(out: &Path, name: &str) -> PathBuf {
    let lib = nccl_cu12_lib();
    let prog = out.join(name);
    cc(&[
        "-Wall",
        "-o",
        prog.to_str().unwrap(),
        root().join(format!("tests/c/{name}.c")).to_str().unwrap(),
        &format!("-I{}", root().join("tests/c").display()),
        &format!("-L{}", lib.display()),
        "-l:libnccl.so.2",
        &format!("-Wl,-rpath,{}", lib.display()),
    ]);
    prog
}

/// The shim must sit next to the ncclshim binary (or in its deps/) for `ncclshim run`: build
/// it when a test runs alone (`cargo test -p collector-cli`); under `cargo test --workspace`
/// it is already built.
pub fn ensure_shim() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ncclshim"));
    let dir = bin.parent().unwrap();
    if !dir.join("libncclshim.so").exists() && !dir.join("deps/libncclshim.so").exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "ncclshim-shim"])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(st.success());
    }
}
