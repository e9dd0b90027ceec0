//! `ncclshim run -- CMD…`: runs a command with the recorder preloaded, the profiler plugin
//! selected and the dump directory set, all by absolute path (children `chdir`, and `torchrun`
//! or `srun` pass the environment on to every rank), waits for it, and reports.
//!
//! The libraries are looked for in `$NCCLSHIM_LIB_DIR`, next to the `ncclshim` binary (cargo
//! builds them into the same `target/<profile>/`), in `../lib` (a release tarball) and where
//! `pip install ncclshim` puts them ([`crate::libdirs`]).
//!
//! How the wrapper treats the job:
//! - **Its own process group.** The job (and everything it starts) is one process group, so a
//!   signal can reach all of it, and the wrapper is a child subreaper, so processes orphaned
//!   inside the job are reaped here rather than by whatever PID 1 a container has.
//! - **Signals are passed on.** SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the wrapper (`kill`,
//!   `scancel`, a Kubernetes pod deletion, Ctrl-C on a terminal the job does not hold) go to the
//!   job's whole process group, and the wrapper keeps waiting. When the job's main process has
//!   ended, what is left of its group (e.g. `cmd &` of a shell script, which ignores SIGINT) gets
//!   SIGTERM, then SIGKILL after [`LEFTOVER_GRACE`]. A **second** signal stops waiting: the group
//!   gets SIGKILL at once. The report follows in every case (the dumps survive SIGKILL). Those
//!   the wrapper was started with ignored are not (below).
//! - **The job's status is the wrapper's**: its exit code, or 128 + the signal that ended it, as
//!   a shell does; 127 when the command is not found, 126 when it cannot be executed (then no
//!   dump directory is left behind).
//! - **The terminal is the job's** when stdin is one and `run` is its foreground job: the job's
//!   group is made the terminal's foreground group, stops and continues (Ctrl-Z, `fg`, `bg`)
//!   carry through the wrapper as through a shell, and the terminal comes back to the wrapper when
//!   the job ends ([`crate::jobcontrol`]). Ctrl-C then reaches the job directly, not through the
//!   wrapper: when the job's main process dies of it (or of Ctrl-\\) what is left of its group is
//!   stopped as for a passed-on signal, and a second Ctrl-C, now the wrapper's, kills it.
//! - **Its own report.** The job's processes are told which run they are (`NCCLSHIM_RUN_ID`, in
//!   every dump header) unless the user or a launcher already named one, and the report is about
//!   that run alone ([`OwnRun`]): two `run`s sharing a `--dir` never report each other's
//!   processes.
//! - **The Flight Recorders are turned on** into `<dump dir>/fr/`, PyTorch's (`TORCH_FR_*` and
//!   the older `TORCH_NCCL_*` names) and torchcomms' (`TORCHCOMM_FR_*`, files
//!   `torchcomms_rank_<N>`), each setting unless the job set it under any of its names
//!   ([`ncclshim_diagnose::knowledge::flight_recorder`]); `fr/` is made 0700 before the job
//!   starts, since neither recorder creates the folder of its dump files.
//! - **A profiler plugin the job chose stays**: NCCL loads one profiler plugin per process, so
//!   with `NCCL_PROFILER_PLUGIN` already naming another one `run` keeps it and says in one line
//!   that ncclshim's per-collective timing is off ([`other_profiler_plugin`]); the job runs.
//! - **No empty directory is left behind**: the directories `run` made (the dump directory, the
//!   folders above it, `fr/`) are removed after the job when nothing was written into them.
//!
//! The signals are blocked in the wrapper and taken synchronously with `sigtimedwait`: no
//! handler runs, so nothing here has to be async-signal-safe. The child gets the wrapper's
//! original signal mask back before it executes the job (`pre_exec`).
//!
//! **A signal ignored when `run` started stays ignored, and is not passed on**, as a shell keeps
//! it: the job inherits SIG_IGN for it, so passing it on would stop nothing, and the wrapper would
//! wait for an end that never comes while counting the signal as the first of two (the next one,
//! a real SIGTERM, would then SIGKILL the job at once). This is the common case, not an odd one:
//! every `cmd &` of a non-interactive shell (a script, a CI step, a test runner started in the
//! background) starts with SIGINT and SIGQUIT ignored, and `nohup` ignores SIGHUP. SIGCHLD
//! inherited ignored would make the kernel reap the job behind the wrapper's back (its status
//! lost, the wrapper waiting forever): the wrapper sets it to the default for itself and gives
//! the job the disposition it inherited.

use crate::jobcontrol::{self, Terminal};
use anyhow::{bail, Context, Result};
use ncclshim_dump::run::RunIdentity;
use ncclshim_format::layout::{fill_fixed, fixed_str, HeaderExt2};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

pub const SHIM_NAME: &str = "libncclshim.so";
/// The name NCCL derives from `NCCL_PROFILER_PLUGIN=ncclshim`; cargo's own name is the fallback.
pub const PLUGIN_NAMES: [&str; 2] = [
    "libnccl-profiler-ncclshim.so",
    "libnccl_profiler_ncclshim.so",
];
/// The hidden subcommand that checks, in a process started under the planned `LD_PRELOAD`,
/// whether the loader really loaded the shim.
pub const PROBE_SUBCOMMAND: &str = "__preload-probe";
/// After the job's main process has ended on a passed-on signal: how long the rest of its
/// process group gets between SIGTERM and SIGKILL.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(5);
/// After SIGKILL: how long to wait for the processes to disappear before reporting anyway
/// (a process in uninterruptible sleep, e.g. stuck in a driver, outlives SIGKILL for a while).
const AFTER_KILL_WAIT: Duration = Duration::from_secs(5);
/// The signals passed on to the job.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// What `run` sets up.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub shim: Option<PathBuf>,
    pub plugin: Option<PathBuf>,
    /// The dump directory (absolute); created by [`execute`] just before the job starts.
    pub dir: PathBuf,
    pub env: Vec<(String, OsString)>,
    /// The Flight Recorder's folder (`<dir>/fr`) when `run` points PyTorch's dump files there;
    /// `None` when the job chose where they go.
    pub fr_dir: Option<PathBuf>,
    /// The run the job's processes name in their dump headers: what `run` reports on.
    pub own_run: OwnRun,
    /// One line for stderr when the job already chose another profiler plugin
    /// ([`other_profiler_plugin`]).
    pub plugin_note: Option<String>,
}

/// The run of the processes one `run` starts, as their dump headers name it (`run_source`,
/// `run_id`): the id `run` gives them in `NCCLSHIM_RUN_ID`, or the one the user (that same
/// variable) or a launcher (a Slurm step, a torchrun, an MPI job: [`RunIdentity`]) gave the
/// wrapper, which its job inherits. Several wrappers of one launched job (`srun ncclshim run`, one
/// per node) then share that job's run, and two unrelated `run`s on one `--dir` never do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnRun {
    pub source: String,
    pub id: String,
    /// `run` chose the id (and sets `NCCLSHIM_RUN_ID` for the job).
    pub chosen_here: bool,
}

/// The source the dump headers give a run named by `NCCLSHIM_RUN_ID` (`dump/src/run.rs`).
const OWN_RUN_SOURCE: &str = "ncclshim";

/// `text` as a dump header's fixed-size `field` holds it: the writer cuts what does not fit
/// ([`ncclshim_format::layout::fill_fixed`]), and the report's run ids are those cut texts.
fn as_stored<const N: usize>(_field: fn(&HeaderExt2) -> &[u8; N], text: &str) -> String {
    let mut bytes = [0u8; N];
    fill_fixed(&mut bytes, text.as_bytes());
    fixed_str(&bytes)
}

/// This host's name (empty if it cannot be read).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    if ok {
        fixed_str(&buf)
    } else {
        String::new()
    }
}

/// The run the job will belong to ([`OwnRun`]), read through `current` (the environment).
pub fn own_run(current: &impl Fn(&str) -> Option<OsString>) -> OwnRun {
    let inherited =
        RunIdentity::from_vars(|name| current(name).map(|v| v.to_string_lossy().into_owned()));
    let (source, id, chosen_here) = if inherited.id.is_empty() {
        // Unique among the wrappers that may share a directory: this host, this process, now.
        let id = format!("{}-{}-{}", timestamp(), hostname(), std::process::id());
        (OWN_RUN_SOURCE.to_owned(), id, true)
    } else {
        (inherited.source, inherited.id, false)
    };
    OwnRun {
        source: as_stored(|h| &h.run_source, &source),
        id: as_stored(|h| &h.run_id, &id),
        chosen_here,
    }
}

/// The Flight Recorder's folder inside the dump directory.
pub const FR_FOLDER: &str = "fr";

/// Directories to search for the recorder libraries, best first ([`crate::libdirs`]).
pub fn library_dirs() -> Vec<PathBuf> {
    match std::env::current_exe().and_then(|p| p.canonicalize()) {
        Ok(exe) => {
            crate::libdirs::candidates(&exe, std::env::var_os(crate::libdirs::LIB_DIR_VARIABLE))
        }
        Err(_) => Vec::new(),
    }
}

pub fn find_in(dirs: &[PathBuf], names: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
}

/// `20250131-142501`: local time, for directory names that sort by time.
fn timestamp() -> String {
    // SAFETY: time(NULL) has no preconditions; localtime_r writes only the tm we own and
    // returns NULL on failure, which is checked.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return now.to_string();
        }
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }
}

/// The dump directory of this run: `dir` as given (`--dir`, shared by every wrapper that names
/// it, e.g. one per node under `srun`); otherwise a fresh `<base>/<time>-<pid>`, where the base
/// is `$NCCLSHIM_DIR` when set, else `./ncclshim-dumps`, so that a report never mixes runs.
pub fn run_dir(dir: Option<&Path>, current: &impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let d = match dir {
        Some(d) => d.to_path_buf(),
        None => current("NCCLSHIM_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("ncclshim-dumps"))
            .join(format!("{}-{}", timestamp(), std::process::id())),
    };
    if d.is_absolute() {
        d
    } else {
        std::env::current_dir().map(|c| c.join(&d)).unwrap_or(d)
    }
}

/// Works out the environment for the command (see [`run_dir`] for the directory).
pub fn plan(
    dir: Option<&Path>,
    with_plugin: bool,
    current: impl Fn(&str) -> Option<OsString>,
) -> Result<RunPlan> {
    let dirs = library_dirs();
    let shim = find_in(&dirs, &[SHIM_NAME]);
    let Some(shim_path) = shim.clone() else {
        bail!(
            "{SHIM_NAME} not found for this ncclshim (looked in {}); `pip install ncclshim` brings both, a build from the repository has it after `cargo build --release --workspace`, or name its directory in {} (docs/install.md)",
            dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
            crate::libdirs::LIB_DIR_VARIABLE
        );
    };
    let plugin = if with_plugin {
        find_in(&dirs, &PLUGIN_NAMES)
    } else {
        None
    };
    let dir = run_dir(dir, &current);

    let mut env = Vec::new();
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
    // A profiler the user chose stays; NCCL loads only one (an empty value chooses nothing).
    let users_plugin = current("NCCL_PROFILER_PLUGIN").filter(|v| !v.is_empty());
    if let Some(p) = plugin.as_ref().filter(|_| users_plugin.is_none()) {
        env.push((
            "NCCL_PROFILER_PLUGIN".to_owned(),
            p.clone().into_os_string(),
        ));
    }
    let plugin_note = if with_plugin {
        users_plugin.as_deref().and_then(other_profiler_plugin)
    } else {
        None
    };
    let fr_dir = flight_recorder_env(&dir, &current, &mut env);
    let own_run = own_run(&current);
    if own_run.chosen_here {
        env.push(("NCCLSHIM_RUN_ID".to_owned(), OsString::from(&own_run.id)));
    }
    Ok(RunPlan {
        shim,
        plugin,
        dir,
        env,
        fr_dir,
        own_run,
        plugin_note,
    })
}

/// The warning for a job whose `NCCL_PROFILER_PLUGIN` names a profiler plugin other than ours
/// (`None` when it names ours, by path or as `ncclshim`). NCCL loads one profiler plugin per
/// process (`src/plugin/profiler.cc`), so `run` keeps the user's choice, which turns off what
/// ours records (per-collective timing, kernel times, the running totals); the shim's own
/// records are unaffected. `none` (any case) turns every profiler off, and is said as such.
pub fn other_profiler_plugin(value: &std::ffi::OsStr) -> Option<String> {
    let v = value.to_string_lossy();
    let base = v.rsplit('/').next().unwrap_or(&v);
    if v == "ncclshim" || PLUGIN_NAMES.contains(&base) {
        return None;
    }
    let what = if v.eq_ignore_ascii_case("none") {
        "NCCL_PROFILER_PLUGIN=none turns NCCL's profiler plugins off".to_owned()
    } else {
        format!("NCCL_PROFILER_PLUGIN={v} names another profiler plugin and NCCL loads only one")
    };
    Some(format!(
        "ncclshim: warning: {what}: keeping yours, so ncclshim's per-collective timing (its \
         profiler plugin) is off for this job; the shim still records every NCCL call \
         (unset NCCL_PROFILER_PLUGIN to get both)"
    ))
}

/// Adds the Flight Recorder settings the job did not make to `env`, each under all its names
/// (PyTorch reads the first one set, so old and new releases both see it). A setting the job
/// made under any of its names is left entirely alone: setting the newer name beside a user's
/// older one would overrule the user on a newer PyTorch. Returns the Flight Recorder's folder
/// when the dump files go there.
fn flight_recorder_env(
    dir: &Path,
    current: &impl Fn(&str) -> Option<OsString>,
    env: &mut Vec<(String, OsString)>,
) -> Option<PathBuf> {
    use ncclshim_diagnose::knowledge::flight_recorder::{settings, FR_DIR_PLACEHOLDER};
    let fr_dir = dir.join(FR_FOLDER);
    let mut uses_fr_dir = false;
    for s in settings() {
        if s.names.iter().any(|n| current(n).is_some()) {
            continue;
        }
        let value = s
            .value
            .replace(FR_DIR_PLACEHOLDER, &fr_dir.to_string_lossy());
        uses_fr_dir |= s.names_a_path();
        for name in &s.names {
            env.push((name.clone(), OsString::from(&value)));
        }
    }
    uses_fr_dir.then_some(fr_dir)
}

/// Whether the planned preload loads on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preload {
    Loads,
    /// It does not; with the loader's own words when it gave any.
    Fails(String),
}

/// Starts this very binary under the planned environment, running [`PROBE_SUBCOMMAND`], which
/// asks the loader whether the shim is in its process ([`shim_is_loaded`]).
///
/// Why a probe and not the job's own output: the loader says why a preload failed only on the
/// job's stderr ("ERROR: ld.so: object … cannot be preloaded (…): ignored"), and reading it
/// would mean putting a pipe between the job and its stderr: programs then see no terminal, and
/// a wrapper that dies would leave them writing into a closed pipe. A dump file proves the
/// shim loaded but its absence proves nothing (the job may never call NCCL). The probe is a
/// dynamically linked program under the same `LD_PRELOAD`, `LD_LIBRARY_PATH` and C library as
/// the job, so it fails for the same reasons (missing file, wrong architecture, a glibc older
/// than the shim was built for), and its stderr carries the loader's message.
pub fn probe_preload(plan: &RunPlan) -> Preload {
    let (Ok(exe), Some(shim)) = (std::env::current_exe(), &plan.shim) else {
        return Preload::Loads;
    };
    // Its exit status says whether the shim loaded: it must not be reaped by the kernel.
    reap_children_here();
    let mut c = Command::new(exe);
    c.arg(PROBE_SUBCOMMAND).arg(shim);
    for (k, v) in &plan.env {
        c.env(k, v);
    }
    // Nothing in the probe may write a dump, even if something in it touched NCCL.
    c.env("NCCLSHIM_DISABLE", "1")
        .stdin(std::process::Stdio::null());
    let out = match c.output() {
        Ok(o) => o,
        // The probe itself could not start: say nothing rather than guess.
        Err(_) => return Preload::Loads,
    };
    if out.status.success() {
        return Preload::Loads;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .lines()
        .find(|l| l.contains("LD_PRELOAD") || l.contains("ld.so"))
        .map(|l| l.trim().to_owned())
        .unwrap_or_else(|| {
            format!(
                "the loader did not load it (probe {}, no message)",
                out.status
            )
        });
    Preload::Fails(why)
}

/// In the probe process: whether `shim` is loaded (the loader preloaded it), without loading it.
pub fn shim_is_loaded(shim: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(shim.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: RTLD_NOLOAD never loads anything: it returns a handle only to an object already
    // in the process (matched by the same path `LD_PRELOAD` named), or NULL.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    !h.is_null()
}

/// How a run ended.
#[derive(Debug, Clone)]
pub enum RunEnd {
    /// The command could not be started: exit with `code` (127 not found, 126 not executable).
    NotStarted {
        code: u8,
        message: String,
    },
    Finished(Outcome),
}

/// A job that ran.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The main process's wait status; `None` if it never went away (after SIGKILL and
    /// [`AFTER_KILL_WAIT`]).
    pub status: Option<ExitStatus>,
    /// The signals passed on to the job, in order.
    pub forwarded: Vec<libc::c_int>,
    /// Whether the wrapper sent SIGKILL to the job's group.
    pub killed: bool,
    /// How long the job ran (until its main process ended, or waiting stopped).
    pub elapsed: Duration,
    /// When the first signal was passed on, after the start.
    pub stopped_after: Option<Duration>,
    /// The job held the terminal ([`crate::jobcontrol`]): Ctrl-C reached it without the wrapper.
    pub held_terminal: bool,
}

impl Outcome {
    /// How the job ended, in words, for the line before the report: the user stopping it
    /// (a signal passed on through the wrapper, or SIGINT / SIGTERM that ended its main
    /// process from outside) is said so, not called a failure.
    pub fn how_it_ended(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
        if let Some(&first) = self.forwarded.first() {
            let after = self.stopped_after.unwrap_or(self.elapsed);
            let killed = if self.killed {
                ", then killed (SIGKILL) on the second signal"
            } else {
                ""
            };
            return format!(
                "stopped by you ({}) after {}{killed}",
                signal_name(first),
                secs(after)
            );
        }
        match self.status {
            Some(s) if matches!(s.signal(), Some(libc::SIGINT | libc::SIGTERM)) => format!(
                "stopped by {} after {} ({})",
                signal_name(s.signal().unwrap_or(0)),
                secs(self.elapsed),
                if self.held_terminal && s.signal() == Some(libc::SIGINT) {
                    "Ctrl-C on the terminal, or sent to the job directly"
                } else {
                    "sent to the job directly, not through ncclshim"
                }
            ),
            Some(s) if !s.success() => format!("the command failed ({s})"),
            Some(_) => "the command ended".to_owned(),
            None => "the command did not end after SIGKILL".to_owned(),
        }
    }

    /// Whether the user stopped the job ([`Outcome::how_it_ended`]).
    pub fn stopped(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        !self.forwarded.is_empty()
            || self
                .status
                .is_some_and(|s| matches!(s.signal(), Some(libc::SIGINT | libc::SIGTERM)))
    }
}

impl Outcome {
    /// The shell-style exit code: the job's own, or 128 + the signal that ended it.
    pub fn code(&self) -> i32 {
        match self.status {
            Some(s) => exit_code(s),
            None => 128 + libc::SIGKILL,
        }
    }
}

/// Creates `dir` and the missing directories above it; returns those it created, deepest last.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut p = Some(dir);
    while let Some(d) = p {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        p = d.parent();
    }
    missing.reverse();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating dump directory {}", dir.display()))?;
    Ok(missing)
}

/// Removes what [`create_dirs`] created, if still empty (never anything with a file in it).
fn remove_created(created: &[PathBuf]) {
    for d in created.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}

/// Makes the Flight Recorder's folder, readable by the user only (PyTorch's dumps hold the
/// job's Python stacks); returns it when it was made here.
fn create_private_dir(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.exists() {
        return None;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .ok()
        .map(|()| dir.to_path_buf())
}

/// Runs `cmd` under `plan` in its own process group and waits for it, passing signals on.
pub fn execute(plan: &RunPlan, cmd: &[OsString]) -> Result<RunEnd> {
    use std::os::unix::process::CommandExt;
    let Some((prog, args)) = cmd.split_first() else {
        bail!("nothing to run: use `ncclshim run -- COMMAND [ARGS...]`");
    };
    let mut created = create_dirs(&plan.dir)?;
    // Deepest last: the Flight Recorder's folder goes before the dump directory at removal.
    created.extend(plan.fr_dir.as_deref().and_then(create_private_dir));
    let mut c = Command::new(prog);
    c.args(args).process_group(0);
    for (k, v) in &plan.env {
        c.env(k, v);
    }
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only changes who reaps orphans of our descendants;
    // a kernel without it (< 3.4) returns an error, which changes nothing and is ignored.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let chld_ignored = reap_children_here();
    let mut terminal = Terminal::foreground_on_stdin();
    let takes_terminal = terminal.is_some();
    let blocked = BlockedSignals::new(takes_terminal);
    let unblocked = blocked.old;
    // SAFETY: runs in the forked child before exec; pthread_sigmask, signal and the terminal
    // calls of `child_takes_foreground` are async-signal-safe and touch only the child's own
    // mask, dispositions and process group, and the terminal's foreground group the wrapper's
    // group held (a copy of the set lives in the closure). The job must start with the mask and
    // the SIGCHLD disposition the wrapper was given, not with what the wrapper set for itself.
    unsafe {
        c.pre_exec(move || {
            if takes_terminal {
                jobcontrol::child_takes_foreground();
            }
            if chld_ignored {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &unblocked, std::ptr::null_mut());
            Ok(())
        })
    };
    let child = match c.spawn() {
        Ok(child) => child,
        Err(e) => {
            // The child may have taken the terminal before its exec failed.
            if let Some(t) = terminal.as_mut() {
                t.reclaim();
            }
            drop(blocked);
            remove_created(&created);
            let name = prog.to_string_lossy();
            let not_found = e.kind() == std::io::ErrorKind::NotFound;
            let cannot_exec = e.kind() == std::io::ErrorKind::PermissionDenied
                || matches!(
                    e.raw_os_error(),
                    Some(libc::ENOEXEC | libc::EISDIR | libc::ETXTBSY | libc::ENOTDIR)
                );
            return match (not_found, cannot_exec) {
                (true, _) => Ok(RunEnd::NotStarted {
                    code: 127,
                    message: format!("{name}: command not found"),
                }),
                (_, true) => Ok(RunEnd::NotStarted {
                    code: 126,
                    message: format!("{name}: cannot execute: {e}"),
                }),
                _ => Err(e).with_context(|| format!("starting {name}")),
            };
        }
    };
    // With `process_group(0)` the job's process group id is its main process's pid.
    let pid = child.id() as libc::pid_t;
    // The Child is not waited through std: `reap` collects every child (orphans included)
    // with waitpid(-1), which would leave std's own wait without a process.
    drop(child);
    if let Some(t) = terminal.as_mut() {
        t.started(pid);
    }
    let outcome = supervise(pid, &blocked, terminal.as_mut());
    // The terminal is back with the wrapper before it prints the report.
    drop(terminal);
    // Nothing called NCCL (or PyTorch wrote no Flight Recorder dump): no empty folder stays.
    remove_created(&created);
    Ok(RunEnd::Finished(outcome))
}

/// Waits for the job whose main process (and process group) is `pid`; see the module docs.
/// `terminal`: the job holds the terminal ([`crate::jobcontrol`]); its stops and continues are
/// then followed, and the terminal comes back to the wrapper when the main process ends.
fn supervise(
    pid: libc::pid_t,
    blocked: &BlockedSignals,
    terminal: Option<&mut Terminal>,
) -> Outcome {
    let mut job = Supervision::new(pid, blocked, terminal);
    loop {
        job.follow();
        let now = Instant::now();
        if job.out.status.is_some() && job.main_process_ended(now) {
            break;
        }
        if job.killed_at.is_some_and(|t| now >= t + AFTER_KILL_WAIT) {
            eprintln!("ncclshim: processes of the job outlived SIGKILL; reporting without them");
            break;
        }
        job.take(blocked.wait(Duration::from_millis(200)));
    }
    job.out.elapsed = job.started.elapsed();
    job.out
}

/// What the wrapper knows of the job while it waits for it ([`supervise`]): the outcome so far
/// and what it has done about the job's end.
struct Supervision<'a> {
    /// The job's main process and process group.
    pid: libc::pid_t,
    blocked: &'a BlockedSignals,
    terminal: Option<&'a mut Terminal>,
    started: Instant,
    out: Outcome,
    // Set once the main process has ended after a passed-on signal: when the rest of the group
    // gets SIGKILL (before `killed`), or when waiting stops (after).
    deadline: Option<Instant>,
    killed_at: Option<Instant>,
    /// The main process, holding the terminal, died of its Ctrl-C or Ctrl-\: the user's stop,
    /// which the wrapper did not see, handled as a passed-on signal.
    stopped_at_terminal: bool,
    /// The main process is stopped now (its continuing is followed with the terminal only).
    job_stopped: bool,
    /// The main process's end was seen (and the terminal taken back once).
    end_seen: bool,
}

impl<'a> Supervision<'a> {
    fn new(
        pid: libc::pid_t,
        blocked: &'a BlockedSignals,
        terminal: Option<&'a mut Terminal>,
    ) -> Self {
        Supervision {
            pid,
            blocked,
            started: Instant::now(),
            out: Outcome {
                status: None,
                forwarded: Vec::new(),
                killed: false,
                elapsed: Duration::ZERO,
                stopped_after: None,
                held_terminal: terminal.is_some(),
            },
            terminal,
            deadline: None,
            killed_at: None,
            stopped_at_terminal: false,
            job_stopped: false,
            end_seen: false,
        }
    }

    /// Collects the ended children; when the job holds the terminal, follows its main
    /// process's stops and continues, and takes the terminal back when it ends.
    fn follow(&mut self) {
        use std::os::unix::process::ExitStatusExt;
        let pid = self.pid;
        let change = reap(pid, &mut self.out.status, self.terminal.is_some());
        if let Some(t) = self.terminal.as_deref_mut() {
            match change {
                Some(JobChange::Stopped(sig)) if self.out.status.is_none() => {
                    self.job_stopped = true;
                    t.take_back(pid, true, true);
                    // Stopped from the terminal (Ctrl-Z, a read or write in the background):
                    // the wrapper stops too, and goes on when the shell continues it. A SIGSTOP
                    // is someone's deliberate stop: the job stays stopped until they continue it.
                    if sig != libc::SIGSTOP {
                        jobcontrol::stop_self(self.blocked.has(libc::SIGTSTP));
                        t.give_to(pid);
                        signal_group(pid, libc::SIGCONT);
                    }
                }
                Some(JobChange::Continued) => {
                    self.job_stopped = false;
                    t.give_to(pid);
                }
                _ => {}
            }
            if self.out.status.is_some() && !self.end_seen {
                let by_signal = self.out.status.and_then(|s| s.signal());
                t.take_back(pid, false, by_signal.is_some());
                self.stopped_at_terminal = matches!(by_signal, Some(libc::SIGINT | libc::SIGQUIT));
            }
        }
        self.end_seen |= self.out.status.is_some();
    }

    /// The main process has ended: whether waiting is over (no signal was passed on, or
    /// nothing of its group is left); else what is left of the group gets SIGTERM, then
    /// SIGKILL after [`LEFTOVER_GRACE`].
    fn main_process_ended(&mut self, now: Instant) -> bool {
        let pid = self.pid;
        if (self.out.forwarded.is_empty() && !self.stopped_at_terminal) || !group_alive(pid) {
            return true;
        }
        match self.deadline {
            None if !self.out.killed => {
                eprintln!(
                    "ncclshim: the job's main process ended; its other processes get SIGTERM \
                     (SIGKILL in {} s)",
                    LEFTOVER_GRACE.as_secs()
                );
                signal_group(pid, libc::SIGTERM);
                if self.out.held_terminal {
                    // A process stopped from the terminal would keep SIGTERM pending:
                    // continue it, as a shell's `kill` does.
                    signal_group(pid, libc::SIGCONT);
                }
                self.deadline = Some(now + LEFTOVER_GRACE);
            }
            Some(t) if now >= t && !self.out.killed => {
                signal_group(pid, libc::SIGKILL);
                self.out.killed = true;
                self.killed_at = Some(now);
            }
            _ => {}
        }
        false
    }

    /// Acts on a signal the wrapper took (`None`: none came while it waited): job control is
    /// passed on, and the others are passed on the first time, SIGKILL the second.
    fn take(&mut self, sig: Option<libc::c_int>) {
        let pid = self.pid;
        match sig {
            None | Some(libc::SIGCHLD) => {}
            // Passed on: the job stops, and its stop is followed ([`Self::follow`]).
            Some(libc::SIGTSTP) => signal_group(pid, libc::SIGTSTP),
            Some(libc::SIGCONT) => {
                if let Some(t) = self
                    .terminal
                    .as_deref_mut()
                    .filter(|_| self.out.status.is_none())
                {
                    t.give_to(pid);
                }
                signal_group(pid, libc::SIGCONT);
            }
            Some(sig) => self.pass_on(sig),
        }
    }

    /// A signal to stop the job: passed on to its group the first time (the user's stop at the
    /// terminal counts as one), SIGKILL to it the second.
    fn pass_on(&mut self, sig: libc::c_int) {
        let pid = self.pid;
        if self.out.forwarded.is_empty() && !self.stopped_at_terminal {
            eprintln!(
                "ncclshim: passed {} on to the job (process group {pid}); waiting for it \
                 to end; send it again (Ctrl-C) to kill the job",
                signal_name(sig)
            );
            signal_group(pid, sig);
            if self.job_stopped {
                signal_group(pid, libc::SIGCONT);
            }
        } else if !self.out.killed {
            eprintln!(
                "ncclshim: {} again: killing the job (SIGKILL to process group {pid})",
                signal_name(sig)
            );
            signal_group(pid, libc::SIGKILL);
            self.out.killed = true;
            self.killed_at = Some(Instant::now());
        }
        self.out.forwarded.push(sig);
        self.out
            .stopped_after
            .get_or_insert_with(|| self.started.elapsed());
    }
}

/// A change of the job's main process other than its end, seen by `waitpid` when the job holds
/// the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobChange {
    /// Stopped by this signal.
    Stopped(libc::c_int),
    Continued,
}

/// Collects every ended child (the main process and orphans reparented to this subreaper),
/// keeping the main process's status; `follow_stops`: also report the main process's stops and
/// continues (the last one seen).
fn reap(
    pid: libc::pid_t,
    status: &mut Option<ExitStatus>,
    follow_stops: bool,
) -> Option<JobChange> {
    use std::os::unix::process::ExitStatusExt;
    let flags = if follow_stops {
        libc::WNOHANG | libc::WUNTRACED | libc::WCONTINUED
    } else {
        libc::WNOHANG
    };
    let mut change = None;
    loop {
        let mut raw: libc::c_int = 0;
        // SAFETY: waitpid writes only `raw`; WNOHANG never blocks.
        let got = unsafe { libc::waitpid(-1, &mut raw, flags) };
        if got <= 0 {
            return change;
        }
        if got != pid {
            continue;
        }
        if libc::WIFSTOPPED(raw) {
            change = Some(JobChange::Stopped(libc::WSTOPSIG(raw)));
        } else if libc::WIFCONTINUED(raw) {
            change = Some(JobChange::Continued);
        } else {
            *status = Some(ExitStatus::from_raw(raw));
        }
    }
}

/// Whether any process of the job's group still exists.
fn group_alive(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(-pgid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: sends a signal to the job's process group, which this wrapper created; an
    // already-empty group returns ESRCH, which is fine.
    unsafe { libc::kill(-pgid, sig) };
}

fn signal_name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        n => format!("signal {n}"),
    }
}

/// Whether `sig`'s disposition in this process is SIG_IGN (inherited across exec).
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: with a NULL new action, sigaction only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Makes this process collect its children's statuses (the probe's, the job's): with SIGCHLD
/// inherited as SIG_IGN the kernel reaps them itself and `waitpid` never returns the job's
/// status. Returns whether it was ignored when first called (the job gets that back,
/// [`execute`]).
fn reap_children_here() -> bool {
    static WAS_IGNORED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WAS_IGNORED.get_or_init(|| {
        if !ignored(libc::SIGCHLD) {
            return false;
        }
        // SAFETY: sets this process's SIGCHLD disposition to the default; no handler is
        // involved.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
        true
    })
}

/// The forwarded signals that were not ignored when the wrapper started, and SIGCHLD, blocked in
/// this thread while the job runs (the wrapper has no other thread then) and taken with
/// `sigtimedwait`; with the job holding the terminal, SIGTSTP (unless ignored on entry) and
/// SIGCONT too, which are passed on as a shell passes them to its foreground job. A forwarded
/// signal ignored on entry is left alone: it stays ignored in the wrapper and in the job (see the
/// module docs). On drop, pending ones are taken first, so unblocking does not deliver a stale
/// Ctrl-C that would kill the wrapper.
struct BlockedSignals {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl BlockedSignals {
    fn new(job_control: bool) -> Self {
        // Read before blocking: a blocked signal is kept pending even when ignored, so one
        // ignored on entry would otherwise be taken and passed on to a job that ignores it too.
        let job_control_signals = [libc::SIGTSTP, libc::SIGCONT]
            .into_iter()
            .filter(|_| job_control)
            .filter(|&s| s == libc::SIGCONT || !ignored(s));
        let taken: Vec<libc::c_int> = FORWARDED
            .iter()
            .copied()
            .filter(|&s| !ignored(s))
            .chain(job_control_signals)
            .chain([libc::SIGCHLD])
            .collect();
        // SAFETY: sigemptyset/sigaddset initialize and fill a set we own; pthread_sigmask only
        // changes this thread's mask and writes the previous one into `old`.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in taken {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            Self { set, old }
        }
    }

    /// Whether `sig` is one of the blocked signals.
    fn has(&self, sig: libc::c_int) -> bool {
        // SAFETY: `set` is initialized; sigismember only reads it.
        unsafe { libc::sigismember(&self.set, sig) == 1 }
    }

    /// The next blocked signal, or `None` after `timeout`.
    fn wait(&self, timeout: Duration) -> Option<libc::c_int> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` is initialized; a NULL siginfo is allowed; `ts` is a valid timespec.
        let s = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (s > 0).then_some(s)
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        while self.wait(Duration::ZERO).is_some() {}
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
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

    #[test]
    fn each_run_gets_a_fresh_directory_unless_one_is_named() {
        let none = |_: &str| None;
        let a = run_dir(None, &none);
        assert!(a.is_absolute());
        assert!(a.parent().unwrap().ends_with("ncclshim-dumps"), "{a:?}");
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.ends_with(&format!("-{}", std::process::id())),
            "{name}"
        );
        let base = |k: &str| (k == "NCCLSHIM_DIR").then(|| OsString::from("/shared/dumps"));
        let b = run_dir(None, &base);
        assert_eq!(b.parent(), Some(Path::new("/shared/dumps")));
        assert_eq!(
            run_dir(Some(Path::new("/x/y")), &base),
            PathBuf::from("/x/y")
        );
    }

    /// `run` names its job's run unless the user or a launcher did; the run it reports on is
    /// named as the dump headers will hold it (cut to the header's field).
    #[test]
    fn the_job_gets_a_run_id_of_its_own_unless_one_was_inherited() {
        let own = own_run(&|_: &str| None);
        assert!(own.chosen_here);
        assert_eq!(own.source, "ncclshim");
        assert!(
            own.id.ends_with(&format!("-{}", std::process::id())),
            "{own:?}"
        );
        let slurm = |k: &str| match k {
            "SLURM_JOB_ID" => Some(OsString::from("812")),
            "SLURM_STEP_ID" => Some(OsString::from("3")),
            _ => None,
        };
        assert_eq!(
            own_run(&slurm),
            OwnRun {
                source: "slurm".into(),
                id: "812.3".into(),
                chosen_here: false
            }
        );
        let long = "x".repeat(100);
        let user = |k: &str| (k == "NCCLSHIM_RUN_ID").then(|| OsString::from(&long));
        let own = own_run(&user);
        assert!(!own.chosen_here);
        assert_eq!((own.source.as_str(), own.id.len()), ("ncclshim", 63));
    }

    #[test]
    fn the_flight_recorder_goes_into_the_dump_directory_unless_the_job_chose() {
        let dir = Path::new("/d/run1");
        let get = |env: &[(String, OsString)], k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let mut env = Vec::new();
        let fr = flight_recorder_env(dir, &|_: &str| None, &mut env);
        assert_eq!(fr.as_deref(), Some(Path::new("/d/run1/fr")));
        for (name, want) in [
            ("TORCH_FR_BUFFER_SIZE", "2000"),
            ("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"),
            ("TORCH_FR_DUMP_ON_TIMEOUT", "1"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
            ("TORCH_FR_DUMP_TEMP_FILE", "/d/run1/fr/rank_"),
            ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/d/run1/fr/rank_"),
            ("TORCHCOMM_FR_BUFFER_SIZE", "2000"),
            ("TORCHCOMM_FR_DUMP_TEMP_FILE", "/d/run1/fr/torchcomms_rank_"),
        ] {
            assert_eq!(get(&env, name).as_deref(), Some(want), "{name}: {env:?}");
        }
        // The user turned it off under the old name and chose the file under the new one: none
        // of either setting's names is set.
        let user = |k: &str| match k {
            "TORCH_NCCL_TRACE_BUFFER_SIZE" => Some(OsString::from("0")),
            "TORCH_FR_DUMP_TEMP_FILE" => Some(OsString::from("/mine/fr_")),
            _ => None,
        };
        let mut env = Vec::new();
        let fr = flight_recorder_env(dir, &user, &mut env);
        assert_eq!(get(&env, "TORCH_FR_BUFFER_SIZE"), None);
        assert_eq!(get(&env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), None);
        assert_eq!(get(&env, "TORCH_FR_DUMP_ON_TIMEOUT").as_deref(), Some("1"));
        // torchcomms' recorder still writes into fr/, so the folder is made.
        assert_eq!(fr.as_deref(), Some(Path::new("/d/run1/fr")));
        assert_eq!(
            get(&env, "TORCHCOMM_FR_DUMP_TEMP_FILE").as_deref(),
            Some("/d/run1/fr/torchcomms_rank_")
        );
    }

    /// torchcomms' settings are the user's when set (its buffer turned off, its files
    /// elsewhere), and PyTorch's are untouched by them.
    #[test]
    fn torchcomms_flight_recorder_settings_the_user_made_stay() {
        let get = |env: &[(String, OsString)], k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let user = |k: &str| match k {
            "TORCHCOMM_FR_BUFFER_SIZE" => Some(OsString::from("0")),
            "TORCHCOMM_FR_DUMP_TEMP_FILE" => Some(OsString::from("/mine/tc_")),
            _ => None,
        };
        let mut env = Vec::new();
        let fr = flight_recorder_env(Path::new("/d/run2"), &user, &mut env);
        assert_eq!(get(&env, "TORCHCOMM_FR_BUFFER_SIZE"), None);
        assert_eq!(get(&env, "TORCHCOMM_FR_DUMP_TEMP_FILE"), None);
        assert_eq!(
            get(&env, "TORCH_FR_DUMP_TEMP_FILE").as_deref(),
            Some("/d/run2/fr/rank_")
        );
        assert_eq!(fr.as_deref(), Some(Path::new("/d/run2/fr")));
    }

    /// A profiler plugin of the user's is kept, with one line saying what that costs; ours, by
    /// any of its names, is not warned about.
    #[test]
    fn another_profiler_plugin_is_kept_and_said() {
        let note = |v: &str| other_profiler_plugin(std::ffi::OsStr::new(v));
        for ours in [
            "ncclshim",
            "/opt/ncclshim/lib/libnccl-profiler-ncclshim.so",
            "libnccl_profiler_ncclshim.so",
        ] {
            assert_eq!(note(ours), None, "{ours}");
        }
        let inspector = note("/opt/nccl/libnccl-profiler-inspector.so").unwrap();
        assert!(
            inspector.starts_with(
                "ncclshim: warning: NCCL_PROFILER_PLUGIN=/opt/nccl/libnccl-profiler-inspector.so names another profiler plugin and NCCL loads only one: keeping yours"
            ),
            "{inspector}"
        );
        assert!(inspector.contains("per-collective timing"), "{inspector}");
        assert!(!inspector.contains('\n'));
        assert!(note("NONE")
            .unwrap()
            .contains("turns NCCL's profiler plugins off"));
        assert!(note("inspector").is_some());
        assert!(note("STATIC_PLUGIN").is_some());
    }

    #[test]
    fn a_stop_by_the_user_is_not_called_a_failure() {
        use std::os::unix::process::ExitStatusExt;
        let outcome = |raw: i32, forwarded: Vec<libc::c_int>| Outcome {
            status: Some(ExitStatus::from_raw(raw)),
            forwarded,
            killed: false,
            elapsed: Duration::from_millis(12_340),
            stopped_after: Some(Duration::from_millis(12_300)),
            held_terminal: false,
        };
        let passed_on = outcome(libc::SIGINT, vec![libc::SIGINT]);
        assert!(passed_on.stopped());
        assert_eq!(
            passed_on.how_it_ended(),
            "stopped by you (SIGINT) after 12.3 s"
        );
        assert_eq!(passed_on.code(), 128 + libc::SIGINT);
        let from_outside = outcome(libc::SIGTERM, vec![]);
        assert!(from_outside.stopped());
        assert!(from_outside
            .how_it_ended()
            .starts_with("stopped by SIGTERM after 12.3 s"));
        // With the terminal, Ctrl-C reaches the job without the wrapper.
        let at_terminal = Outcome {
            held_terminal: true,
            ..outcome(libc::SIGINT, vec![])
        };
        assert!(at_terminal.stopped());
        assert_eq!(
            at_terminal.how_it_ended(),
            "stopped by SIGINT after 12.3 s (Ctrl-C on the terminal, or sent to the job directly)"
        );
        let failed = outcome(1 << 8, vec![]);
        assert!(!failed.stopped());
        assert_eq!(failed.how_it_ended(), "the command failed (exit status: 1)");
        assert_eq!(failed.code(), 1);
    }

    #[test]
    fn directories_created_for_a_run_that_never_started_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("a/b/c");
        let created = create_dirs(&d).unwrap();
        assert_eq!(created.len(), 3);
        assert!(d.is_dir());
        remove_created(&created);
        assert!(!tmp.path().join("a").exists());
        assert!(tmp.path().exists());
    }
}
