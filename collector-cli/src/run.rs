//! `ncclshim run -- CMD…`: runs a command with the recorder preloaded, the profiler plugin
//! selected and the dump directory set, all by absolute path (children `chdir`, and `torchrun`
//! or `srun` pass the environment on to every rank), then reports if the command failed.
//!
//! The libraries are looked for next to the `ncclshim` binary (an install puts them side by
//! side, cargo builds them into the same `target/<profile>/`), then in `../lib`.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

pub const SHIM_NAME: &str = "libncclshim.so";
/// The name NCCL derives from `NCCL_PROFILER_PLUGIN=ncclshim`; cargo's own name is the fallback.
pub const PLUGIN_NAMES: [&str; 2] = [
    "libnccl-profiler-ncclshim.so",
    "libnccl_profiler_ncclshim.so",
];

/// What `run` sets up.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub shim: Option<PathBuf>,
    pub plugin: Option<PathBuf>,
    pub dir: PathBuf,
    pub env: Vec<(String, OsString)>,
}

/// Directories to search for the recorder libraries.
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(exe) = std::env::current_exe().and_then(|p| p.canonicalize()) {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
            dirs.push(d.join("../lib"));
            // Under `cargo test` the binary is in target/<profile>/ while the freshly built
            // cdylibs may only be in target/<profile>/deps/ (cargo does not always copy them up).
            dirs.push(d.join("deps"));
        }
    }
    dirs
}

pub fn find_in(dirs: &[PathBuf], names: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
}

/// Works out the environment for the command. `dir` defaults to `$NCCLSHIM_DIR`, else a new
/// `ncclshim-dumps/<time>` under the current directory.
pub fn plan(
    dir: Option<&Path>,
    with_plugin: bool,
    current: impl Fn(&str) -> Option<OsString>,
) -> Result<RunPlan> {
    let dirs = library_dirs();
    let shim = find_in(&dirs, &[SHIM_NAME]);
    if shim.is_none() {
        bail!(
            "{SHIM_NAME} not found next to the ncclshim binary (looked in {}); build it with `cargo build --release --workspace`",
            dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let plugin = if with_plugin {
        find_in(&dirs, &PLUGIN_NAMES)
    } else {
        None
    };
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => match current("NCCLSHIM_DIR").filter(|v| !v.is_empty()) {
            Some(v) => PathBuf::from(v),
            None => {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                PathBuf::from("ncclshim-dumps").join(format!("run-{secs}"))
            }
        },
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating dump directory {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;

    let mut env = Vec::new();
    let shim_path = shim.clone().expect("checked above");
    // Keep whatever the user preloads; ours goes first so it sees NCCL before anyone else wraps it.
    let mut preload = OsString::from(&shim_path);
    if let Some(prev) = current("LD_PRELOAD").filter(|v| !v.is_empty()) {
        if !prev.to_string_lossy().contains(SHIM_NAME) {
            preload.push(" ");
            preload.push(prev);
        } else {
            preload = prev;
        }
    }
    env.push(("LD_PRELOAD".to_owned(), preload));
    env.push(("NCCLSHIM_DIR".to_owned(), dir.clone().into_os_string()));
    if let Some(p) = &plugin {
        // A profiler the user chose stays; NCCL loads only one.
        if current("NCCL_PROFILER_PLUGIN").is_none() {
            env.push((
                "NCCL_PROFILER_PLUGIN".to_owned(),
                p.clone().into_os_string(),
            ));
        }
    }
    Ok(RunPlan {
        shim,
        plugin,
        dir,
        env,
    })
}

/// Runs `cmd` under `plan` and waits for it.
pub fn execute(plan: &RunPlan, cmd: &[OsString]) -> Result<ExitStatus> {
    let Some((prog, args)) = cmd.split_first() else {
        bail!("nothing to run: use `ncclshim run -- COMMAND [ARGS...]`");
    };
    let mut c = Command::new(prog);
    c.args(args);
    for (k, v) in &plan.env {
        c.env(k, v);
    }
    c.status()
        .with_context(|| format!("starting {}", prog.to_string_lossy()))
}

/// The shell-style exit code of a finished command (128 + signal when killed).
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_found_by_name_and_exit_codes_follow_the_shell() {
        let libdir = tempfile::tempdir().unwrap();
        let shim = libdir.path().join(SHIM_NAME);
        std::fs::write(&shim, b"").unwrap();
        assert_eq!(
            find_in(&[libdir.path().to_path_buf()], &[SHIM_NAME]),
            shim.canonicalize().ok()
        );
        assert_eq!(find_in(&[libdir.path().to_path_buf()], &PLUGIN_NAMES), None);
        assert_eq!(
            exit_code(
                std::process::Command::new("sh")
                    .args(["-c", "exit 3"])
                    .status()
                    .unwrap()
            ),
            3
        );
        let killed = std::process::Command::new("sh")
            .args(["-c", "kill -9 $$"])
            .status()
            .unwrap();
        assert_eq!(exit_code(killed), 137);
    }
}
