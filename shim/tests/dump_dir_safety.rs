//! The dump directory and file cannot be turned against the job, and the dump cannot take the
//! job down: the real shim preloaded into a real program calling the real PyPI libnccl.
//! - the default `$TMPDIR/ncclshim-<uid>` planted by someone else (a symbolic link, a directory
//!   owned by another user, one that group or others may write) is refused with one stderr line,
//!   nothing written there, the program's output and exit status unchanged;
//! - a directory the user named may be group-writable (a shared job directory), not
//!   world-writable without the sticky bit; one that is a file is refused in one line that says
//!   so; a relative one is resolved against the directory the process started in, not the one
//!   it has at its first NCCL call;
//! - a live dump truncated to 0 bytes under the running process (SIGBUS on its mapping) leaves
//!   the process running to the same exit status, with recording turned off and said so.
//!
//! The ownership checks need root (to give a directory to `nobody`); run as another user they
//! check what they can and say what they skipped.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

/// The program run under the shim with the default dump directory under `tmpdir`.
fn with_default_dir(prog: &Path, tmpdir: &Path, mode: &str) -> Output {
    let mut c = preloaded(prog, Path::new("/unused"));
    c.env_remove("NCCLSHIM_DIR").env("TMPDIR", tmpdir).arg(mode);
    c.output().unwrap()
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The shim's own stderr lines.
fn shim_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("ncclshim:"))
        .map(str::to_owned)
        .collect()
}

/// The program ran as without the shim, the shim refused the directory in one line, and
/// nothing was written into `dir`.
fn assert_refused(prog: &Path, out: &Output, dir: &Path, why: &str) {
    let bare = Command::new(prog).arg("version").output().unwrap();
    assert_eq!(out.status.code(), bare.status.code());
    assert_eq!(out.stdout, bare.stdout);
    let lines = shim_lines(out);
    assert_eq!(lines.len(), 1, "one line from the shim: {lines:?}");
    assert!(
        lines[0].contains("refusing dump directory") && lines[0].contains(why),
        "{lines:?}"
    );
    assert!(
        dump_files(dir).is_empty(),
        "nothing may be written into {}",
        dir.display()
    );
}

#[test]
fn a_default_dump_directory_planted_as_a_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let tmpdir = tmp.path().join("tmp");
    let target = tmp.path().join("attacker-target");
    std::fs::create_dir_all(&tmpdir).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&target, tmpdir.join(format!("ncclshim-{}", uid()))).unwrap();
    let out = with_default_dir(&prog, &tmpdir, "version");
    assert_refused(&prog, &out, &target, "symbolic link");
}

#[test]
fn a_default_dump_directory_made_by_another_user_or_writable_by_others_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let tmpdir = tmp.path().join("tmp");
    let dir = tmpdir.join(format!("ncclshim-{}", uid()));
    std::fs::create_dir_all(&dir).unwrap();

    // Ours, but group-writable (an attacker cannot make it so; a careless umask can).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    let out = with_default_dir(&prog, &tmpdir, "version");
    assert_refused(&prog, &out, &dir, "0770");

    if euid() == 0 {
        // Another user's private directory (as root can arrange): an attacker made it first.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let out = with_default_dir(&prog, &tmpdir, "version");
        assert_refused(&prog, &out, &dir, "owned by uid 65534");
    } else {
        eprintln!("not root: the foreign-owner case is not checked");
    }
}

#[test]
fn the_default_dump_directory_is_created_private_and_used() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let tmpdir = tmp.path().join("tmp");
    let out = with_default_dir(&prog, &tmpdir, "version");
    assert!(out.status.success(), "{out:?}");
    assert!(shim_lines(&out).is_empty(), "{out:?}");
    let dir = tmpdir.join(format!("ncclshim-{}", uid()));
    let meta = std::fs::symlink_metadata(&dir).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), euid());
    assert_eq!(dump_files(&dir).len(), 1);
}

#[test]
fn a_chosen_directory_may_be_shared_by_a_group_but_not_open_to_everyone() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let shared = tmp.path().join("job-dumps");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let out = run(preloaded(&prog, &shared).arg("version"));
    assert!(shim_lines(&out).is_empty(), "{out:?}");
    assert_eq!(dump_files(&shared).len(), 1);

    let open = tmp.path().join("open-dumps");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = preloaded(&prog, &open).arg("version").output().unwrap();
    assert_refused(&prog, &out, &open, "sticky");

    // With the sticky bit (like /tmp) others cannot rename or delete our files: accepted.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = run(preloaded(&prog, &open).arg("version"));
    assert!(shim_lines(&out).is_empty(), "{out:?}");
    assert_eq!(dump_files(&open).len(), 1);
}

/// Issue 36 item 10: `NCCLSHIM_DIR` naming a regular file said only "File exists". The program
/// runs as without the shim, one line says the variable names a file, the file is untouched.
#[test]
fn a_dump_directory_that_is_a_file_is_refused_in_one_line_saying_so() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let file = tmp.path().join("not-a-directory");
    std::fs::write(&file, "mine").unwrap();
    for (dir, why) in [
        (
            file.clone(),
            "NCCLSHIM_DIR names a file, not a directory".to_owned(),
        ),
        (
            file.join("dumps"),
            format!("{} on the way to it is a file", file.display()),
        ),
    ] {
        let out = preloaded(&prog, &dir).arg("version").output().unwrap();
        assert_refused(&prog, &out, &dir, &why);
        assert!(
            shim_lines(&out)[0].contains("the program continues unaffected"),
            "{out:?}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    }
}

/// Issue 36 item 10: a relative `NCCLSHIM_DIR` was resolved at the first NCCL call, so a daemon
/// that had changed directory to `/` wrote to `/reldumps`. It is resolved when the shim loads:
/// the program changes directory after that, then calls NCCL, and the dump is where it started.
#[test]
fn a_relative_dump_directory_is_resolved_where_the_process_started() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let started = tmp.path().join("started-here");
    let moved = tmp.path().join("moved-here");
    std::fs::create_dir_all(&started).unwrap();
    std::fs::create_dir_all(&moved).unwrap();
    let mut cmd = preloaded(&prog, Path::new("reldumps"));
    cmd.current_dir(&started)
        .arg(format!("chdir:{}", moved.display()));
    let out = run(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ncclGetVersion rc=0"));
    assert!(shim_lines(&out).is_empty(), "{out:?}");
    assert_eq!(dump_files(&started.join("reldumps")).len(), 1);
    assert!(
        !moved.join("reldumps").exists(),
        "written where it moved to"
    );
}

#[test]
fn a_dump_truncated_under_the_live_process_does_not_kill_it() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_driver(Wheel::Cu12, tmp.path(), false);
    let bare_dir = tmp.path().join("bare");
    std::fs::create_dir_all(&bare_dir).unwrap();
    let bare = Command::new(&prog)
        .arg("truncate")
        .env("NCCLSHIM_DIR", &bare_dir)
        .output()
        .unwrap();
    assert!(bare.status.success(), "{bare:?}");
    // With the fatal-signal capture (which sees the SIGBUS first) and without it (the fault
    // guard alone).
    for signals in ["1", "0"] {
        let dir = tmp.path().join(format!("dumps-signals-{signals}"));
        let out = preloaded(&prog, &dir)
            .arg("truncate")
            .env("NCCLSHIM_SIGNALS", signals)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            bare.status.code(),
            "NCCLSHIM_SIGNALS={signals}: {out:?}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("truncated 1 file(s)"), "{stdout}");
        assert!(
            stdout.contains("after truncation ncclGetVersion rc=0"),
            "{stdout}"
        );
        let lines = shim_lines(&out);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("truncated"), "{lines:?}");
        assert!(stdout.contains("child status=0"), "{stdout}");
        // Recording stopped for good: the file was not grown back, and the guard's callback
        // switched the recorder off, so the forked child (which inherits that state) did not
        // start a dump of its own. Without the callback the recorder stays "ready" over
        // anonymous memory, and the child would write a second file.
        let files = dump_files(&dir);
        assert_eq!(files.len(), 1);
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 0);
    }
}
