//! `ncclshim run` on a terminal: the job is the terminal's foreground job, as under a shell. The
//! real `ncclshim` binary runs inside `script` (util-linux), which gives it a pseudo-terminal as
//! its controlling terminal and stdin and types this test's input on it: a job that reads the
//! terminal gets the line instead of being stopped (SIGTTIN) forever; a job stopped from the
//! terminal stops the wrapper, and `fg` in an interactive bash continues both; Ctrl-C reaches the
//! job, and what is left of its process group is stopped.
//!
//! Nothing here measures time: the input is typed before the job starts and waits in the
//! terminal, which hands it out a line per read in the order the job and the shell read it; the
//! Ctrl-C is typed once the job said it is ready. A wrapper that hangs (the bug this guards
//! against) fails the test after [`GUARD`], with everything it started killed, rather than
//! hanging the test run. Without `script` (or bash, for the job-control test) a test says so and
//! passes without running: both are in every Debian/Ubuntu base system (bsdutils, bash).

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::native::ensure_shim;
use support::procs::{descendants, processes};

/// How long a wrapper may take before the test calls it hung: generous for a machine loaded by
/// parallel builds, never a measure of speed.
const GUARD: Duration = Duration::from_secs(180);

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `script` (and `also`) can run here; says why not on stderr otherwise.
fn terminal_tools(also: &[&str]) -> bool {
    for p in std::iter::once(&"script").chain(also) {
        if !have(p) {
            eprintln!(
                "SKIPPED: `{p}` is not installed (util-linux `script` gives the job a terminal)"
            );
            return false;
        }
    }
    true
}

/// Runs `command` with `shell -c` on a new pseudo-terminal (`script -qec`), typing `input` on
/// it, and waits for it to end; `then`: once the terminal shows its first text, its second is
/// typed too. Returns its exit status and everything the terminal showed. After
/// [`GUARD`] it kills every process it started and fails.
fn on_terminal(
    shell: &str,
    command: &str,
    input: &str,
    then: Option<(&str, &str)>,
    tmp: &Path,
) -> (i32, String) {
    let out_path = tmp.join("terminal.out");
    let mut child = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .env("SHELL", shell)
        .env("HISTFILE", "/dev/null")
        .env_remove("NCCLSHIM_DIR")
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Kept open until the end: `script` hands what it reads here to the terminal.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let mut pending = then;
    let end = Instant::now() + GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let shown = std::fs::read_to_string(&out_path).unwrap_or_default();
        if let Some((_, typed)) = pending.filter(|(shows, _)| shown.contains(shows)) {
            stdin.write_all(typed.as_bytes()).unwrap();
            stdin.flush().unwrap();
            pending = None;
        }
        if Instant::now() >= end {
            for pid in descendants(child.id() as i32) {
                // SAFETY: a descendant of this test's live, unreaped `script`.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("hung: no end after {GUARD:?}; the terminal showed:\n{shown}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    let shown = std::fs::read_to_string(&out_path).unwrap_or_default();
    (status.code().expect("script exits"), shown)
}

/// `sh -c 'read x; …'` under `ncclshim run` on a terminal reads the line typed there, as it does
/// without the wrapper (before: stopped by SIGTTIN in a background process group, forever).
#[test]
fn a_job_reads_the_terminal_it_was_started_on() {
    if !terminal_tools(&[]) {
        return;
    }
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let command = format!(
        "{} run --dir {} -- sh -c 'read x; echo got:$x; exit 3'",
        env!("CARGO_BIN_EXE_ncclshim"),
        tmp.path().join("dumps").display()
    );
    let (code, shown) = on_terminal("/bin/sh", &command, "hi\n", None, tmp.path());
    assert!(shown.contains("got:hi"), "{shown}");
    assert_eq!(code, 3, "the job's status passes through: {shown}");
}

/// In an interactive bash (job control on), a job that is stopped from the terminal (here it
/// sends itself SIGTSTP, as Ctrl-Z would) stops `ncclshim run` too: bash says "Stopped" and
/// reads its next line, `fg`, which continues the wrapper, which gives the terminal back to the
/// job and continues it; the job then reads its line. (Before: the job stopped in its own group,
/// the wrapper waited for it forever, and bash never got the terminal back.)
#[test]
fn a_job_stopped_from_the_terminal_stops_the_wrapper_and_fg_continues_both() {
    if !terminal_tools(&["bash"]) {
        return;
    }
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let run = format!(
        "{} run --dir {} -- sh -c 'kill -TSTP $$; read x; echo got:$x; exit 7'",
        env!("CARGO_BIN_EXE_ncclshim"),
        tmp.path().join("dumps").display()
    );
    // Each line is read by whoever reads the terminal next: bash the command, the job nothing
    // (it stops first), bash `fg`, the job `hi`, bash `exit` (with the job's status).
    let input = format!("{run}\nfg\nhi\nexit\n");
    let (code, shown) = on_terminal(
        "/bin/bash",
        "bash --norc --noprofile --noediting -i",
        &input,
        None,
        tmp.path(),
    );
    assert!(shown.contains("Stopped"), "bash saw the job stop: {shown}");
    assert!(shown.contains("got:hi"), "{shown}");
    assert_eq!(code, 7, "{shown}");
}

/// Ctrl-C typed on the terminal reaches the job, which holds it: its main process dies of
/// SIGINT, the wrapper stops what is left of its group (`cmd &` of a script ignores SIGINT) and
/// exits 130, and the terminal is the shell's again.
#[test]
fn ctrl_c_on_the_terminal_stops_the_whole_job() {
    if !terminal_tools(&[]) {
        return;
    }
    ensure_shim();
    let tmp = tempfile::tempdir().unwrap();
    let pids = tmp.path().join("pids");
    let command = format!(
        "{} run --dir {} -- sh -c 'sleep 600 & echo $! >> {p}; sleep 600 & echo $! >> {p}; echo job-ready; wait'",
        env!("CARGO_BIN_EXE_ncclshim"),
        tmp.path().join("dumps").display(),
        p = pids.display()
    );
    // Ctrl-C once the job's background processes run.
    let ctrl_c = Some(("job-ready", "\x03"));
    let (code, shown) = on_terminal("/bin/sh", &command, "", ctrl_c, tmp.path());
    assert_eq!(code, 128 + libc::SIGINT, "{shown}");
    assert!(shown.contains("its other processes get SIGTERM"), "{shown}");
    assert!(
        shown.contains("stopped by SIGINT after ") && shown.contains("Ctrl-C on the terminal"),
        "{shown}"
    );
    let left: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(left.len(), 2);
    let alive = processes()
        .into_iter()
        .filter(|p| left.contains(&p.pid) && p.comm == "sleep" && p.state != 'Z')
        .count();
    assert_eq!(
        alive, 0,
        "the job's background sleeps were stopped: {shown}"
    );
}
