//! The release artifacts as users install them.
//!
//! `pip install ncclshim` end to end: the release wheel (scripts/build-wheel.sh: manylinux2014,
//! built once into target/wheels and rebuilt incrementally) is installed into a fresh virtual
//! environment by pip with no Rust toolchain on PATH, and everything after that runs from the
//! environment only:
//! - the demo: a real NCCL failure (the PyPI wheel's libnccl, NCCL_SOCKET_IFNAME with a typo, no
//!   GPU needed) recorded under the installed `ncclshim run`, which must find the installed
//!   libraries by itself, then the report;
//! - `python -m ncclshim report` on the same dumps;
//! - a Python program that loads an NCCL user through ctypes, started by a launcher with the
//!   environment from `ncclshim.environ()` (LD_PRELOAD = `ncclshim.shim_path()`), whose dump the
//!   report reads.
//!
//! The release tarball (scripts/build-tarball.sh, the wheel's files as bin/ and lib/): its
//! `ncclshim run` preloads the libraries of its own tree, wherever it is unpacked.
//!
//! Packaging checks: both tests build the release wheel with zig (minutes on a fresh clone; the
//! pinned tools from scripts/tools-requirements.txt, ~115 MB), so they are `#[ignore]`d in the
//! README's `cargo test --workspace` and run by `.ci/run`:
//! `cargo test -p ncclshim-integration-tests --test install -- --ignored`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}\n{}", text(&o));
    o
}

/// Runs one of the project's build scripts and returns the path it prints last.
fn build(script: &str, args: &[&Path]) -> PathBuf {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts").join(script)).args(args);
    // Variables cargo sets for a test are not meant for the cargo runs inside the script.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("CARGO_") && k != "CARGO_HOME" {
            cmd.env_remove(k);
        }
    }
    let o = ok(&mut cmd);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let built = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(built.is_file(), "{script} printed no file\n{}", text(&o));
    built
}

/// The release wheel, built (or brought up to date) once for the tests of this file, which run
/// in parallel: the script rebuilds the same files.
fn wheel() -> PathBuf {
    static WHEEL: OnceLock<PathBuf> = OnceLock::new();
    let wheel = WHEEL.get_or_init(|| build("build-wheel.sh", &[])).clone();
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("ncclshim-{}-", env!("CARGO_PKG_VERSION")))
            && name.ends_with("manylinux_2_17_x86_64.whl"),
        "{name}"
    );
    wheel
}

/// PATH without any directory that holds a Rust toolchain (cargo, rustc).
fn path_without_rust() -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.join("cargo").exists() && !d.join("rustc").exists())
        .collect();
    std::env::join_paths(kept).unwrap()
}

/// The real libnccl.so.2 of the nvidia-nccl-cu12 wheel (scripts/fetch-nccl.sh).
fn nccl_lib_dir() -> PathBuf {
    ok(Command::new("bash").arg(repo_root().join("scripts/fetch-nccl.sh")));
    repo_root().join(".cache/nccl/cu12/lib")
}

/// tests/c/nccl_fail.c against that libnccl: the program, or the library a ctypes program loads.
fn nccl_fail(out: &Path, as_library: bool) -> PathBuf {
    let lib = nccl_lib_dir();
    let dest = out.join(if as_library {
        "libnccl_fail.so"
    } else {
        "nccl_fail"
    });
    let mut cc = Command::new("cc");
    cc.arg("-o").arg(&dest);
    if as_library {
        cc.args(["-shared", "-fPIC", "-DNCCL_FAIL_LIB"]);
    }
    cc.arg(repo_root().join("tests/c/nccl_fail.c"))
        .arg(format!("-I{}", repo_root().join("tests/c").display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-l:libnccl.so.2")
        .arg(format!("-Wl,-rpath,{}", lib.display()));
    ok(&mut cc);
    dest
}

/// A command as an activated environment runs it: only the environment's bin and PATH without
/// Rust, nothing of this test's own environment (no NCCL_*, NCCLSHIM_*, LD_PRELOAD, CARGO_*).
fn in_venv(venv: &Path, program: impl AsRef<std::ffi::OsStr>, home: &Path) -> Command {
    let mut path = vec![venv.join("bin")];
    path.extend(std::env::split_paths(&path_without_rust()));
    let mut c = Command::new(program);
    c.env_clear()
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("HOME", home)
        .env("VIRTUAL_ENV", venv)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    c
}

/// The report found the socket-interface failure that NCCL_SOCKET_IFNAME=eht0 causes.
fn assert_socket_finding(o: &Output) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "a failure was found\n{}", text(o));
    assert!(stdout.contains("[C08]"), "{}", text(o));
    assert!(stdout.contains("no socket interface found"), "{}", text(o));
}

#[test]
#[ignore = "packaging check (builds the release wheel with zig): .ci/run runs it with --ignored"]
fn the_wheel_installs_with_pip_and_records_a_real_nccl_failure() {
    let wheel = wheel();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let venv = tmp.path().join("venv");
    ok(Command::new("python3").arg("-m").arg("venv").arg(&venv));
    let python = venv.join("bin/python");

    // pip, with no Rust anywhere on PATH: the wheel must need nothing to be built.
    let no_rust = in_venv(&venv, "sh", &home)
        .args(["-c", "command -v cargo || command -v rustc"])
        .output()
        .unwrap();
    assert!(
        !no_rust.status.success(),
        "Rust on PATH: {}",
        text(&no_rust)
    );
    ok(in_venv(&venv, &python, &home)
        .args(["-m", "pip", "install", "--no-index", "--quiet"])
        .arg(&wheel));

    // Where the package put things, as the Python module says.
    let o = ok(in_venv(&venv, &python, &home).args([
        "-c",
        "import ncclshim as n; print(n.shim_path()); print(n.plugin_path()); print(n.cli_path()); \
         print(n.__version__)",
    ]));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    let site = venv.join("lib").canonicalize().unwrap();
    assert!(
        lines[0].starts_with(site.to_str().unwrap()) && lines[0].ends_with("/libncclshim.so"),
        "{stdout}"
    );
    assert!(
        lines[1].ends_with("/libnccl-profiler-ncclshim.so"),
        "{stdout}"
    );
    let cli = venv.join("bin/ncclshim").canonicalize().unwrap();
    assert_eq!(Path::new(lines[2]), cli, "{stdout}");
    assert_eq!(lines[3], env!("CARGO_PKG_VERSION"));

    // The demo, from the environment: the installed `ncclshim` finds the installed libraries.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let prog = nccl_fail(&work, false);
    let preload = ok(in_venv(&venv, "ncclshim", &home)
        .arg("run")
        .arg("--dir")
        .arg(work.join("probe"))
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD|$NCCL_PROFILER_PLUGIN\"",
        ]));
    let stdout = String::from_utf8_lossy(&preload.stdout);
    assert_eq!(
        stdout.trim(),
        format!("{}|{}", lines[0], lines[1]),
        "ncclshim run preloads the installed package's libraries\n{}",
        text(&preload)
    );
    // `python -m ncclshim` is the same command, told the package's library directory.
    let by_module = ok(in_venv(&venv, &python, &home)
        .args(["-m", "ncclshim", "run", "--dir"])
        .arg(work.join("probe"))
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD|$NCCL_PROFILER_PLUGIN\"",
        ]));
    assert_eq!(
        String::from_utf8_lossy(&by_module.stdout).trim(),
        stdout.trim(),
        "{}",
        text(&by_module)
    );
    let dumps = work.join("demo");
    let run = ok(in_venv(&venv, "ncclshim", &home)
        .env("NCCL_SOCKET_IFNAME", "eht0")
        .arg("run")
        .arg("--dir")
        .arg(&dumps)
        .arg("--")
        .arg(&prog)
        .arg("uniqueid"));
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("ncclGetUniqueId rc="),
        "{}",
        text(&run)
    );
    assert_socket_finding(
        &in_venv(&venv, "ncclshim", &home)
            .arg("report")
            .arg(&dumps)
            .output()
            .unwrap(),
    );
    assert_socket_finding(
        &in_venv(&venv, &python, &home)
            .args(["-m", "ncclshim", "report"])
            .arg(&dumps)
            .output()
            .unwrap(),
    );

    // A launcher in Python: the ctypes program is started with ncclshim.environ(), whose
    // LD_PRELOAD is ncclshim.shim_path().
    let lib = nccl_fail(&work, true);
    let ctypes_dumps = work.join("ctypes");
    let launcher = r#"
import os, subprocess, sys
import ncclshim
add = ncclshim.environ(dir=sys.argv[1])
assert add["LD_PRELOAD"] == ncclshim.shim_path(), add
assert add["NCCLSHIM_DIR"] == os.path.abspath(sys.argv[1]), add
# What the launcher had stays: its preload after ours, its profiler instead of ours.
kept = ncclshim.environ(dir="d", base={"LD_PRELOAD": "/x/other.so", "NCCL_PROFILER_PLUGIN": "mine"})
assert kept["LD_PRELOAD"] == ncclshim.shim_path() + " /x/other.so", kept
assert "NCCL_PROFILER_PLUGIN" not in kept, kept
# Without dir: a fresh directory per run under $NCCLSHIM_DIR, as `ncclshim run` does.
fresh = ncclshim.environ(base={"NCCLSHIM_DIR": "/shared/dumps"})
assert os.path.dirname(fresh["NCCLSHIM_DIR"]) == "/shared/dumps", fresh
assert fresh["NCCLSHIM_DIR"].endswith("-%d" % os.getpid()), fresh
env = dict(os.environ, NCCL_SOCKET_IFNAME="eht0", **add)
sys.exit(subprocess.call([sys.executable, sys.argv[2], sys.argv[3], "uniqueid"], env=env))
"#;
    ok(in_venv(&venv, &python, &home)
        .arg("-c")
        .arg(launcher)
        .arg(&ctypes_dumps)
        .arg(repo_root().join("tests/python/nccl_ctypes.py"))
        .arg(&lib));
    assert!(
        std::fs::read_dir(&ctypes_dumps).unwrap().count() >= 1,
        "the preloaded shim wrote a dump"
    );
    assert_socket_finding(
        &in_venv(&venv, &python, &home)
            .args(["-m", "ncclshim", "report"])
            .arg(&ctypes_dumps)
            .output()
            .unwrap(),
    );
}

#[test]
#[ignore = "packaging check (builds the release wheel with zig): .ci/run runs it with --ignored"]
fn the_release_tarball_runs_with_its_own_libraries_wherever_it_is_unpacked() {
    // From the wheel this file's other test installs, not rebuilding it under that test's feet.
    let tarball = build("build-tarball.sh", &[&wheel()]);
    let tmp = tempfile::tempdir().unwrap();
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(tarball)
        .arg("-C")
        .arg(tmp.path()));
    let top = tmp.path().join(format!(
        "ncclshim-{}-x86_64-linux",
        env!("CARGO_PKG_VERSION")
    ));
    let moved = tmp.path().join("opt/somewhere/ncclshim");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&top, &moved).unwrap();
    let o = ok(Command::new(moved.join("bin/ncclshim"))
        .env_remove("NCCLSHIM_LIB_DIR")
        .env_remove("LD_PRELOAD")
        .env_remove("NCCL_PROFILER_PLUGIN")
        .arg("run")
        .arg("--dir")
        .arg(tmp.path().join("dumps"))
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD|$NCCL_PROFILER_PLUGIN\"",
        ]));
    let lib = moved.join("lib").canonicalize().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!(
            "{}|{}",
            lib.join("libncclshim.so").display(),
            lib.join("libnccl-profiler-ncclshim.so").display()
        ),
        "{}",
        text(&o)
    );
}
