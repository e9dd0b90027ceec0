//! `ncclshim run` end to end: the real `libncclshim.so` preloaded into a real NCCL program (the
//! PyPI wheel's libnccl, fetched by `scripts/fetch-nccl.sh`), the dump directory set, the
//! command's exit code passed through, and the report printed when the command fails or is
//! stopped: Ctrl-C (once and twice) and SIGTERM on a hung two-rank job, whose processes must all
//! be gone afterwards; a missing command; a preload that cannot load; PyTorch's and torchcomms'
//! Flight Recorders turned on into the dump directory unless the job set them; a profiler plugin
//! of the user's kept, with one warning line; no empty directory left behind.
//!
//! No test here depends on how fast this machine is: the hung job says it is ready through
//! marker files its ranks write once NCCL was called, and the waits' deadlines only keep a
//! broken build from hanging the test run (they are minutes, never what a test measures).
//! Nor on how the test run was started: the wrapper of a hung job starts with the signals the
//! test sends at their default disposition, as a terminal's foreground job has them (a test
//! runner started as `cmd &` by a script has SIGINT and SIGQUIT ignored, which every child
//! inherits), and no test signals a process group by a number it saw earlier (pids are reused).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::native::{ensure_shim, nccl_fail_program};
use support::procs::{descendants, processes, Proc};

/// How long a wait may last before the test gives up: a guard against a hang, generous for a
/// machine loaded by parallel builds, never a measure of speed.
const HANG_GUARD: Duration = Duration::from_secs(600);

#[test]
fn the_exit_code_of_the_command_is_kept() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(dir.path().join("dumps"))
        .args(["--", "sh", "-c", "echo $LD_PRELOAD; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.trim().ends_with("libncclshim.so"),
        "absolute preload path: {stdout}"
    );
    assert!(Path::new(stdout.trim()).is_absolute());
    // sh never touched NCCL: no dump was written, the report says there is nothing to read, and
    // the directories `run` made for it (the dump directory and its `fr/`) are gone.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wrote no dump"), "{stderr}");
    assert!(!dir.path().join("dumps").exists(), "{stderr}");
}

/// The job sees the Flight Recorders turned on into `<dump dir>/fr/`: PyTorch's under the new
/// and the old names, torchcomms' under its own; a setting the user made under either name stays
/// as it is, and its other name is not set beside it. The job succeeds: one line, no report.
#[test]
fn the_flight_recorder_is_turned_on_unless_the_job_set_it() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let names = [
        "TORCH_FR_BUFFER_SIZE",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_FR_DUMP_ON_TIMEOUT",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
        "TORCH_FR_DUMP_TEMP_FILE",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "TORCHCOMM_FR_BUFFER_SIZE",
        "TORCHCOMM_FR_DUMP_TEMP_FILE",
    ];
    // The job prints each variable and whether the Flight Recorder's folder exists (and is
    // private) while it runs.
    let script = format!(
        "for v in {}; do eval \"echo $v=\\${{$v-unset}}\"; done; stat -c 'fr=%a' \"$NCCLSHIM_DIR/fr\"",
        names.join(" ")
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
    cmd.args(["run", "--dir"])
        .arg(&dumps)
        .args(["--", "sh", "-c", &script])
        .env("TORCH_NCCL_TRACE_BUFFER_SIZE", "0");
    for n in names
        .iter()
        .filter(|n| **n != "TORCH_NCCL_TRACE_BUFFER_SIZE")
    {
        cmd.env_remove(n);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let fr = dumps.join("fr");
    let prefix = format!("{}/rank_", fr.display());
    for want in [
        "TORCH_FR_BUFFER_SIZE=unset".to_owned(),
        "TORCH_NCCL_TRACE_BUFFER_SIZE=0".to_owned(),
        "TORCH_FR_DUMP_ON_TIMEOUT=1".to_owned(),
        "TORCH_NCCL_DUMP_ON_TIMEOUT=1".to_owned(),
        format!("TORCH_FR_DUMP_TEMP_FILE={prefix}"),
        format!("TORCH_NCCL_DEBUG_INFO_TEMP_FILE={prefix}"),
        "TORCHCOMM_FR_BUFFER_SIZE=2000".to_owned(),
        format!(
            "TORCHCOMM_FR_DUMP_TEMP_FILE={}/torchcomms_rank_",
            fr.display()
        ),
        "fr=700".to_owned(),
    ] {
        assert!(stdout.lines().any(|l| l == want), "{want}: {stdout}");
    }
    // A success says it in one line; nothing was recorded, so nothing is left behind.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("nothing was recorded"), "{stderr}");
    assert!(!dumps.exists());

    // The user's own dump file prefixes, for both recorders: `run` makes no `fr/` and leaves
    // the names alone; torchcomms' buffer size, which the user did not set, is still set.
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .args(["--", "sh", "-c", &script])
        .env("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/elsewhere/trace_")
        .env_remove("TORCH_FR_DUMP_TEMP_FILE")
        .env("TORCHCOMM_FR_DUMP_TEMP_FILE", "/elsewhere/tc_")
        .env_remove("TORCHCOMM_FR_BUFFER_SIZE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/elsewhere/trace_"),
        "{stdout}"
    );
    assert!(stdout.contains("TORCH_FR_DUMP_TEMP_FILE=unset"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l == "TORCHCOMM_FR_DUMP_TEMP_FILE=/elsewhere/tc_"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == "TORCHCOMM_FR_BUFFER_SIZE=2000"),
        "{stdout}"
    );
    assert!(!stdout.contains("fr=700"), "no fr/ made: {stdout}");
}

/// A profiler plugin the user chose is kept (NCCL loads one): `run` says so in one warning line,
/// before the job's own output, and the job runs as usual.
#[test]
fn another_profiler_plugin_is_kept_with_one_warning() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(dir.path().join("dumps"))
        .args([
            "--",
            "sh",
            "-c",
            "echo NCCL_PROFILER_PLUGIN=$NCCL_PROFILER_PLUGIN",
        ])
        .env(
            "NCCL_PROFILER_PLUGIN",
            "/opt/nccl/libnccl-profiler-inspector.so",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l == "NCCL_PROFILER_PLUGIN=/opt/nccl/libnccl-profiler-inspector.so"),
        "{stdout}"
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ncclshim: warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0]
            .contains("names another profiler plugin and NCCL loads only one: keeping yours")
            && warnings[0].contains("per-collective timing"),
        "{stderr}"
    );
    // Ours, named by the user, is no warning.
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(dir.path().join("dumps2"))
        .args(["--", "true"])
        .env("NCCL_PROFILER_PLUGIN", "ncclshim")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// A job that succeeds after calling NCCL: one line says where its dumps are, and no report.
#[test]
fn a_successful_job_says_where_its_dumps_are_in_one_line() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(dir.path());
    let dumps = dir.path().join("dumps");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .arg("--")
        .arg(&prog)
        .arg("version")
        .env_remove("NCCLSHIM_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ncclshim:"))
        .collect();
    assert_eq!(ours.len(), 1, "{stderr}");
    assert!(
        ours[0].contains(&dumps.display().to_string()) && ours[0].contains("dump file"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ncclshim report: "));
    assert!(!ncclshim_diagnose::load::find_dumps(&dumps)
        .unwrap()
        .is_empty());
    // PyTorch wrote no Flight Recorder dump: its empty folder is gone, the dumps stay.
    assert!(!dumps.join("fr").exists());
}

#[test]
fn a_failing_nccl_job_is_recorded_and_reported() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(dir.path());
    let dumps = dir.path().join("dumps");
    let script = format!("{} uniqueid; exit 1", prog.display());
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .args(["--", "sh", "-c", &script])
        .env("NCCL_SOCKET_IFNAME", "nonexistent0")
        .env_remove("NCCLSHIM_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[C08]"),
        "report printed after the failure: {stdout}"
    );
    assert!(stdout.contains("no socket interface found"), "{stdout}");
    let n = std::fs::read_dir(&dumps).unwrap().count();
    assert!(n >= 1, "the shim wrote its dump into --dir");
}

/// A program that catches NCCL's error and goes on (a framework that falls back does the same)
/// exits 0: `run` says which call failed in which process, with NCCL's code and text, and the
/// command that explains it, in two lines instead of the clean run's one; no report.
#[test]
fn a_job_that_exits_0_after_a_failed_nccl_call_is_told_so() {
    ensure_shim();
    let dir = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(dir.path());
    let dumps = dir.path().join("dumps");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .arg("--")
        .arg(&prog)
        .arg("uniqueid")
        .env("NCCL_SOCKET_IFNAME", "nonexistent0")
        .env_remove("NCCLSHIM_DIR")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // What the program itself saw (the code differs between NCCL releases).
    let rc: i32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ncclGetUniqueId rc="))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_ne!(rc, 0, "the call failed: {stdout}");
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ncclshim:"))
        .collect();
    assert_eq!(ours.len(), 2, "{stderr}");
    assert!(
        ours[0].contains("the command ended with status 0, but ")
            && ours[0].contains(" pid ")
            && ours[0].contains(&format!(
                "had a failed call: ncclGetUniqueId returned {rc} "
            ))
            && ours[0].contains("no socket interface found"),
        "{stderr}"
    );
    assert!(
        ours[1].ends_with(&format!("ncclshim report {}", dumps.display())),
        "{stderr}"
    );
    assert!(!stdout.contains("ncclshim report: "), "no report: {stdout}");
}

/// Two `ncclshim run` on one `--dir` at the same time, each with a job that fails in its own way
/// (one cannot find a socket interface, the other has no GPU): each prints the report of its own
/// process only. Both jobs are alive at once and both dumps are in the directory before either
/// wrapper reports: each job ends only once the other has failed. (Before: each reported "the
/// most recent run" of the directory, which held both processes as one run.)
#[test]
fn two_runs_on_one_directory_each_report_their_own_job() {
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(tmp.path());
    let dumps = tmp.path().join("dumps");
    let gate = tmp.path().join("gate");
    std::fs::create_dir(&gate).unwrap();
    // The job fails its NCCL call, says so, and waits (bounded: a guard, not a measure) for the
    // other job to have failed too.
    let job = |mode: &str, me: &str, other: &str| {
        format!(
            "{prog} {mode}; touch {g}/{me}; i=0; while [ ! -e {g}/{other} ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i+1)); done; exit 1",
            prog = prog.display(),
            g = gate.display()
        )
    };
    let start = |script: String, env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
        c.args(["run", "--dir"])
            .arg(&dumps)
            .args(["--", "sh", "-c", &script])
            .env_remove("NCCLSHIM_DIR")
            .env_remove("NCCL_SOCKET_IFNAME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Nothing inherited names the run (NCCLSHIM_RUN_ID, a Slurm job the tests run in...):
        // each wrapper gives its job an id of its own.
        for name in ncclshim_dump::run::id_variables() {
            c.env_remove(name);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    };
    let no_socket = start(
        job("uniqueid", "a", "b"),
        &[("NCCL_SOCKET_IFNAME", "nonexistent0")],
    );
    let no_gpu = start(job("init", "b", "a"), &[]);
    let finish = |child: std::process::Child| {
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (a_code, a_report, a_err) = finish(no_socket);
    let (b_code, b_report, b_err) = finish(no_gpu);
    assert_eq!(a_code, Some(1), "{a_err}");
    assert_eq!(b_code, Some(1), "{b_err}");
    assert_eq!(
        ncclshim_diagnose::load::find_dumps(&dumps).unwrap().len(),
        2,
        "one dump per job in the shared directory"
    );
    let socket_text = "no socket interface found";
    let gpu_text = "CUDA driver version is insufficient";
    for (report, own, other) in [
        (&a_report, socket_text, gpu_text),
        (&b_report, gpu_text, socket_text),
    ] {
        assert!(report.contains("ncclshim report: "), "{report}");
        assert!(report.contains(own), "its own failure: {report}");
        assert!(!report.contains(other), "not the other job's: {report}");
        assert!(report.contains(" 1 process"), "{report}");
        assert!(report.contains("this directory holds 2 runs"), "{report}");
    }
}

/// Live (non-zombie) members of a process group.
fn group_members(pgrp: i32) -> Vec<Proc> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgrp && p.state != 'Z')
        .collect()
}

fn poll<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The signals a test sends to the wrapper; set to their default disposition in the wrapper
/// (then `ignored`, SIG_IGN), whatever the test run inherited.
const SENT: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// `ncclshim run` on a job of two ranks that call real NCCL and then hang (sleep), with the
/// wrapper's output in files. Dropping it kills whatever is left of the job if the test
/// stopped half-way (the wrapper's descendants, then the wrapper).
struct HungJob {
    wrapper: std::process::Child,
    job_group: i32,
    /// The job's processes once it hangs: (pid, start).
    members: Vec<(i32, u64)>,
    dumps: PathBuf,
    out: PathBuf,
    err: PathBuf,
    _tmp: tempfile::TempDir,
}

impl HungJob {
    /// `prelude` runs in the job's shell before the two ranks start (e.g. a trap).
    fn start(prelude: &str) -> Self {
        Self::start_ignoring(prelude, &[])
    }

    /// As [`HungJob::start`], with the wrapper started with the signals `ignored` ignored (as
    /// `nohup` or a script's `cmd &` starts it).
    fn start_ignoring(prelude: &str, ignored: &'static [libc::c_int]) -> Self {
        use std::os::unix::process::CommandExt;
        ensure_shim();
        let tmp = tempfile::tempdir().unwrap();
        let prog = nccl_fail_program(tmp.path());
        let dumps = tmp.path().join("dumps");
        let ready = tmp.path().join("ready");
        std::fs::create_dir(&ready).unwrap();
        let (out, err) = (tmp.path().join("stdout"), tmp.path().join("stderr"));
        // Each rank calls NCCL (the shim writes its dump), then says so with a marker file of
        // its own, then hangs.
        let rank = |i: u32| {
            format!(
                "({} version && touch {}/rank{i}; exec sleep 600)",
                prog.display(),
                ready.display()
            )
        };
        let script = format!("{prelude} {} & {} & wait", rank(0), rank(1));
        let mut wrapper = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
        wrapper
            .args(["run", "--dir"])
            .arg(&dumps)
            .args(["--", "sh", "-c", &script])
            .env_remove("NCCLSHIM_DIR")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        // SAFETY: runs in the forked child before exec; `signal` is async-signal-safe and
        // changes only the child's own dispositions.
        unsafe {
            wrapper.pre_exec(move || {
                for sig in SENT {
                    libc::signal(sig, libc::SIG_DFL);
                }
                for &sig in ignored {
                    libc::signal(sig, libc::SIG_IGN);
                }
                Ok(())
            })
        };
        let wrapper = wrapper.spawn().unwrap();
        let wpid = wrapper.id() as i32;
        let mut job = HungJob {
            wrapper,
            job_group: 0,
            members: Vec::new(),
            dumps,
            out,
            err,
            _tmp: tmp,
        };
        // The job's shell is the wrapper's child and leads its own process group.
        job.job_group = poll("the job's shell", HANG_GUARD, || {
            processes()
                .into_iter()
                .find(|p| p.ppid == wpid && p.pgrp == p.pid)
                .map(|p| p.pid)
        });
        // Both ranks have called NCCL (each wrote its dump and its marker) and hang in sleep.
        poll("two hung ranks", HANG_GUARD, || {
            let marked = std::fs::read_dir(&ready).map_or(0, |d| d.count());
            let sleeping = group_members(job.job_group)
                .iter()
                .filter(|p| p.comm == "sleep")
                .count();
            (marked == 2 && sleeping == 2).then_some(())
        });
        job.members = group_members(job.job_group)
            .iter()
            .map(|p| (p.pid, p.start))
            .collect();
        assert!(
            ncclshim_diagnose::load::find_dumps(&job.dumps)
                .unwrap()
                .len()
                >= 2
        );
        job
    }

    fn signal_wrapper(&self, sig: libc::c_int) {
        // SAFETY: signals the wrapper this test started (still our unreaped child).
        assert_eq!(unsafe { libc::kill(self.wrapper.id() as i32, sig) }, 0);
    }

    /// Waits (with a generous deadline) for the wrapper to exit; its code, stdout and stderr.
    fn finish(&mut self) -> (i32, String, String) {
        let status = poll("the wrapper to exit", HANG_GUARD, || {
            self.wrapper.try_wait().unwrap()
        });
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        (
            status.code().expect("the wrapper exits, it is not killed"),
            read(&self.out),
            read(&self.err),
        )
    }

    /// None of the job's processes is left alive.
    fn assert_job_gone(&self) {
        let left: Vec<Proc> = processes()
            .into_iter()
            .filter(|p| p.state != 'Z' && self.members.contains(&(p.pid, p.start)))
            .collect();
        assert!(
            left.is_empty(),
            "job processes left: {:?}",
            left.iter().map(|p| (p.pid, &p.comm)).collect::<Vec<_>>()
        );
    }
}

impl Drop for HungJob {
    fn drop(&mut self) {
        // Only a wrapper not yet waited for (the test stopped half-way) can have a job left;
        // its pid is still its own then, and so are its descendants.
        if let Ok(None) = self.wrapper.try_wait() {
            for pid in descendants(self.wrapper.id() as i32) {
                // SAFETY: a descendant of this test's live, unreaped wrapper.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = self.wrapper.kill();
            let _ = self.wrapper.wait();
        }
    }
}

#[test]
fn ctrl_c_on_a_hung_job_stops_every_rank_then_reports() {
    // The shell dies of SIGINT; its background ranks ignore SIGINT (POSIX, for `cmd &` in a
    // script), so the wrapper stops them (SIGTERM to what is left of the group).
    let mut job = HungJob::start("");
    job.signal_wrapper(libc::SIGINT);
    let (code, stdout, stderr) = job.finish();
    assert_eq!(code, 128 + libc::SIGINT, "the job's status: {stderr}");
    assert!(
        stderr.contains("its other processes get SIGTERM"),
        "{stderr}"
    );
    assert!(stderr.contains("passed SIGINT on to the job"), "{stderr}");
    // Said as the user's own stop, not as a failure.
    assert!(
        stderr.contains("stopped by you (SIGINT) after "),
        "{stderr}"
    );
    assert!(stderr.contains("what the ranks had done"), "{stderr}");
    assert!(!stderr.contains("the command failed"), "{stderr}");
    assert!(
        stdout.contains("ncclshim report: ") && stdout.contains("2 processes"),
        "the report follows: {stdout}\n{stderr}"
    );
    job.assert_job_gone();
}

#[test]
fn a_second_ctrl_c_kills_a_job_that_ignores_the_first() {
    // A job that ignores SIGINT (as a rank blocked inside a C call effectively does).
    let mut job = HungJob::start("trap '' INT;");
    job.signal_wrapper(libc::SIGINT);
    poll("the first SIGINT to be passed on", HANG_GUARD, || {
        std::fs::read_to_string(&job.err)
            .ok()
            .filter(|e| e.contains("passed SIGINT"))
    });
    job.signal_wrapper(libc::SIGINT);
    let (code, stdout, stderr) = job.finish();
    assert_eq!(code, 128 + libc::SIGKILL, "{stderr}");
    assert!(stderr.contains("killing the job"), "{stderr}");
    assert!(stdout.contains("ncclshim report: "), "{stdout}\n{stderr}");
    job.assert_job_gone();
}

/// `nohup ncclshim run …` starts the wrapper with SIGHUP ignored, a script's `ncclshim run … &`
/// with SIGINT and SIGQUIT ignored, and the job inherits that. Such a signal is not passed on:
/// it would stop nothing, the wrapper would wait for an end that never comes, and it would count
/// as the first of two, so that a later SIGTERM killed the job at once. Here the SIGTERM after
/// them is the first signal: the job is stopped gracefully, and the report follows.
#[test]
fn a_signal_ignored_when_run_started_is_not_passed_on() {
    let mut job = HungJob::start_ignoring("", &[libc::SIGINT, libc::SIGHUP]);
    // Ignored and not blocked, these two are discarded as they are sent: no race with the third.
    job.signal_wrapper(libc::SIGINT);
    job.signal_wrapper(libc::SIGHUP);
    job.signal_wrapper(libc::SIGTERM);
    let (code, stdout, stderr) = job.finish();
    assert_eq!(code, 128 + libc::SIGTERM, "{stderr}");
    assert!(stderr.contains("passed SIGTERM on to the job"), "{stderr}");
    assert!(
        !stderr.contains("SIGINT") && !stderr.contains("SIGHUP"),
        "{stderr}"
    );
    assert!(!stderr.contains("killing the job"), "{stderr}");
    assert!(stdout.contains("ncclshim report: "), "{stdout}\n{stderr}");
    job.assert_job_gone();
}

/// A wrapper started with SIGCHLD ignored (which would let the kernel reap the job behind its
/// back) still gets the job's status, and the job still starts with SIGCHLD ignored.
#[test]
fn a_wrapper_started_with_sigchld_ignored_keeps_the_job_status() {
    use std::os::unix::process::CommandExt;
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let run = |job: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ncclshim"));
        c.args(["run", "--dir"])
            .arg(tmp.path().join("d"))
            .arg("--")
            .args(job)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: `signal` in the forked child before exec changes only its own disposition.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                Ok(())
            })
        };
        let mut child = c.spawn().unwrap();
        // A wrapper that lost the status would wait forever: a deadline, not a measure.
        poll("the wrapper to exit", HANG_GUARD, || {
            child.try_wait().unwrap()
        });
        child.wait_with_output().unwrap()
    };
    let out = run(&["sh", "-c", "exit 3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["cat", "/proc/self/status"]);
    assert_eq!(out.status.code(), Some(0));
    let ignored = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap();
    assert_ne!(ignored & (1 << (libc::SIGCHLD - 1)), 0, "{ignored:x}");
}

#[test]
fn sigterm_to_the_wrapper_stops_the_job_instead_of_orphaning_it() {
    let mut job = HungJob::start("");
    job.signal_wrapper(libc::SIGTERM);
    let (code, stdout, stderr) = job.finish();
    assert_eq!(code, 128 + libc::SIGTERM, "{stderr}");
    assert!(stderr.contains("passed SIGTERM on to the job"), "{stderr}");
    assert!(
        stderr.contains("stopped by you (SIGTERM) after "),
        "{stderr}"
    );
    assert!(stdout.contains("ncclshim report: "), "{stdout}\n{stderr}");
    job.assert_job_gone();
}

#[test]
fn a_missing_command_exits_127_and_leaves_no_directory() {
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let dumps = tmp.path().join("new/dumps");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .args(["--", "ncclshim-no-such-command-xyz", "arg"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        vec!["ncclshim: ncclshim-no-such-command-xyz: command not found"]
    );
    assert!(!tmp.path().join("new").exists(), "no empty dump directory");

    let not_exec = tmp.path().join("script.txt");
    std::fs::write(&not_exec, "not a program").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(&dumps)
        .arg("--")
        .arg(&not_exec)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot execute"));
    assert!(!tmp.path().join("new").exists());
}

#[test]
fn a_preload_that_cannot_load_is_told_apart_from_a_job_without_nccl() {
    // A copy of the binary next to a broken libncclshim.so: the loader refuses it.
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("ncclshim");
    std::fs::copy(env!("CARGO_BIN_EXE_ncclshim"), &bin).unwrap();
    std::fs::write(tmp.path().join("libncclshim.so"), b"").unwrap();
    let out = Command::new(&bin)
        .args(["run", "--no-plugin", "--dir"])
        .arg(tmp.path().join("dumps"))
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: the recorder cannot be preloaded here")
            && stderr.contains("cannot be preloaded"),
        "{stderr}"
    );
    assert!(stderr.contains("the recorder was not loaded"), "{stderr}");

    // The real shim loads; the job just never called NCCL.
    ensure_shim();
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(tmp.path().join("dumps2"))
        .args(["--", "sh", "-c", "exit 3"])
        .env_remove("NCCLSHIM_DISABLE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the recorder loads here, but no process of the job called NCCL"),
        "{stderr}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn the_job_starts_with_the_signal_mask_the_wrapper_was_given() {
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let blocked = |status: &str| {
        status
            .lines()
            .find(|l| l.starts_with("SigBlk:"))
            .map(str::to_owned)
    };
    let mine = blocked(&std::fs::read_to_string("/proc/thread-self/status").unwrap());
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(["run", "--dir"])
        .arg(tmp.path().join("d"))
        .args(["--", "cat", "/proc/self/status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(blocked(&String::from_utf8_lossy(&out.stdout)), mine);
}
