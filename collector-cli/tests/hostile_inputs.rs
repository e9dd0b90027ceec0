//! The CLI against directories and dumps that try to hang it, mislead it or drive the reader's
//! terminal: a FIFO named like a dump, an unreadable (looping) subdirectory, a symbolic link
//! loop that reaches one dump twice, a path that does not exist, recorded strings full of
//! control characters (through the real shim and the real PyPI libnccl), and a dump that could
//! not grow because its disk was full (the real shim and the NCCL TEST DOUBLE, on a small tmpfs
//! when the test runs as root, else under a file size limit).

mod support;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::native::{build_against_double, nccl_fail_program, shim_so};

fn ncclshim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ncclshim"))
}

/// Runs `cmd`, killing it if it has not ended after a minute: a hang fails the test instead of
/// stalling the suite (a safety net, not a timing assertion).
fn finishes(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{cmd:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Output {
        status: child.wait().unwrap(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut out.stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut out.stderr)
        .unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A directory with one readable synthetic dump.
fn job_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ncclshim_fixtures::scenarios::c01(dir.path()).unwrap();
    dir
}

fn report_json(dir: &Path) -> serde_json::Value {
    let out = finishes(ncclshim().arg("report").arg("--json").arg(dir));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn a_fifo_named_like_a_dump_is_named_and_never_waited_on() {
    let empty = tempfile::tempdir().unwrap();
    let fifo = empty.path().join("node1.7.7.shim.ncclshim");
    mkfifo(&fifo);
    for sub in ["report", "trace"] {
        let mut c = ncclshim();
        c.arg(sub).arg(empty.path());
        if sub == "trace" {
            c.arg("-o").arg(empty.path().join("t.json"));
        }
        let out = finishes(&mut c);
        assert_eq!(out.status.code(), Some(2), "{sub}: {out:?}");
        let err = text(&out.stderr);
        if sub == "report" {
            assert_eq!(err.lines().count(), 1, "{sub}: {err}");
        }
        assert!(
            err.contains("node1.7.7.shim.ncclshim") && err.contains("FIFO"),
            "{sub}: {err}"
        );
    }
    let out = finishes(ncclshim().arg("dump").arg(&fifo));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("not a regular file"), "{out:?}");

    // Next to a real dump: the report is made and the FIFO is listed among the problems.
    let dir = job_dir();
    let dumps = report_json(dir.path())["job"]["dumps"].clone();
    mkfifo(&dir.path().join("node2.8.8.shim.ncclshim"));
    let v = report_json(dir.path());
    assert_eq!(v["job"]["dumps"], dumps);
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["file"] == "node2.8.8.shim.ncclshim"
                && p["error"].as_str().unwrap().contains("FIFO")),
        "{problems:?}"
    );
}

#[test]
fn an_unreadable_subdirectory_is_a_problem_not_silence() {
    let dir = job_dir();
    // A host's subdirectory that cannot be listed: a link to itself (ELOOP, even for root).
    std::os::unix::fs::symlink("host-b", dir.path().join("host-b")).unwrap();
    let v = report_json(dir.path());
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["file"] == "host-b"),
        "the looping entry is listed: {problems:?}"
    );
    // Without root's override, a subdirectory without read permission is one too.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let closed = dir.path().join("host-c");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).unwrap();
        let v = report_json(dir.path());
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(
            v["problems"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["file"] == "host-c"),
            "{v}"
        );
    }
}

#[test]
fn a_symlink_loop_does_not_count_a_dump_twice() {
    let dir = job_dir();
    let before = report_json(dir.path())["job"].clone();
    std::os::unix::fs::symlink(".", dir.path().join("again")).unwrap();
    let v = report_json(dir.path());
    assert_eq!(v["job"]["dumps"], before["dumps"], "{}", v["job"]);
    assert_eq!(v["job"]["processes"], before["processes"]);
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn a_path_that_does_not_exist_says_so_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nonexistent");
    let out = finishes(ncclshim().arg("report").arg(&missing));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = finishes(ncclshim().arg("report").arg(&file));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a directory"), "{out:?}");
}

/// Whether `s` holds a character that drives a terminal (ESC, BEL, CR, other C0 or C1).
fn has_control(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n')
}

#[test]
fn recorded_control_characters_never_reach_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = nccl_fail_program(tmp.path());
    let dumps = tmp.path().join("dumps");
    let ifname = "eth\x1b]0;PWNED\x07";
    let out = Command::new(&prog)
        .arg("uniqueid")
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", &dumps)
        .env("NCCL_SOCKET_IFNAME", ifname)
        .env("NCCLSHIM_RUN_ID", "run1\nfirst failure: forged\r")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let report = finishes(ncclshim().args(["report", "--color", "never"]).arg(&dumps));
    let stdout = text(&report.stdout);
    assert!(
        stdout.contains("PWNED"),
        "the report quotes the interface setting (else this test checks nothing): {stdout}"
    );
    assert!(!has_control(&stdout), "raw control characters: {stdout:?}");
    assert!(!has_control(&text(&report.stderr)), "{report:?}");

    let runs = finishes(ncclshim().args(["report", "--list-runs"]).arg(&dumps));
    let listed = text(&runs.stdout);
    assert_eq!(listed.lines().count(), 1, "{listed:?}");
    assert!(
        listed.contains("run1\\nfirst failure: forged"),
        "{listed:?}"
    );
    assert!(!has_control(&listed.replace('\t', " ")), "{listed:?}");

    // JSON keeps the exact bytes.
    let v = report_json(&dumps);
    assert!(v.to_string().contains("\\u001b]0;PWNED\\u0007"), "{v}");
}

/// Runs `cmd` with its dump directory on a full disk: a 1 MiB tmpfs mounted here when root may
/// mount (returned, to unmount), else a file size limit just above the dump's fixed part (the
/// writer treats both alike: the file cannot grow).
fn on_a_full_disk(cmd: &mut Command, dumps: &Path) -> Option<PathBuf> {
    std::fs::create_dir_all(dumps).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(dumps)
        .output()
        .is_ok_and(|o| o.status.success());
    if mounted {
        return Some(dumps.to_path_buf());
    }
    // SAFETY: setrlimit is async-signal-safe and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let rl = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &rl);
            Ok(())
        });
    }
    None
}

#[test]
fn a_full_disk_is_reported_as_such_not_as_ring_wrap() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_against_double(tmp.path(), "thread_calls");
    let dumps = tmp.path().join("dumps");
    let copy = tmp.path().join("copy");
    let mut cmd = Command::new(&prog);
    // Six workers and the main thread: seven rings of 256 KiB cannot fit beside the fixed part.
    cmd.args(["6", "2000"])
        .env("LD_PRELOAD", shim_so())
        .env("NCCLSHIM_DIR", &dumps)
        .env_remove("NCCLSHIM_RUN_ID");
    let mount = on_a_full_disk(&mut cmd, &dumps);
    let out = cmd.output().unwrap();
    // Copied off the tmpfs before it goes away.
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(&dumps).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
    }
    if let Some(m) = mount {
        let _ = Command::new("umount").arg(m).status();
    }
    assert!(out.status.success(), "{out:?}");
    let v = report_json(&copy);
    support::schema::check_report(&v);
    let gaps = v["evidence_gaps"].to_string();
    let lost = finishes(ncclshim().args(["report", "--color", "never"]).arg(&copy));
    let stdout = text(&lost.stdout);
    assert!(stdout.contains("could not grow"), "{stdout}");
    assert!(
        !stdout.contains("raise NCCLSHIM_RING_SLOTS to keep more"),
        "{stdout}"
    );
    assert!(stdout.contains("free space"), "{stdout}");
    assert!(
        gaps.contains("records_lost"),
        "the overflow ring wrapped: {gaps}"
    );
}
