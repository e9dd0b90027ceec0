//! The writer under stress and under death: many threads at once, a child SIGKILLed at a random
//! moment, a forked child, and dump directories that cannot be written.
//!
//! Child processes are this test binary re-executed with `NCCLSHIM_TEST_ROLE` set; the role
//! functions below are ordinary `#[test]`s that do nothing unless that variable names them.

use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::process::ProcessRecorder;
use ncclshim_dump::{CallId, Entry, RecordKind, Recorder, WriterKind};
use ncclshim_format::reader::read_dump;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const THREADS: u64 = 6;
const PER_THREAD: u64 = 50_000;
const ROLE: &str = "NCCLSHIM_TEST_ROLE";

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

fn child(role: &str, test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    c
}

fn dumps_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "ncclshim"));
    v.sort();
    v
}

fn stress_config(dir: &Path) -> RecorderConfig {
    let mut c = RecorderConfig::defaults(WriterKind::Synthetic, dir.to_path_buf());
    c.rings = THREADS as u32;
    c.slots_per_ring = 65536;
    c.arena_bytes = 4096;
    c.normalized()
}

/// Each thread writes calls (args: thread, index) and publishes how many it committed in a
/// separate shared "witness" file, so the parent knows what must be in the dump.
fn write_from_threads(
    rec: &'static Recorder,
    witness: Option<&'static [std::sync::atomic::AtomicU64]>,
) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let ring = rec.claim_ring();
                for i in 0..PER_THREAD {
                    let mut e = Entry::new(RecordKind::Call, CallId::Test);
                    e.args = [t, i, t ^ i, !i, i * 3, t + 7, i << 8, 0xabcd, t * i];
                    let p = ring.begin(&e);
                    p.complete((i % 7) as i32);
                    if let Some(w) = witness {
                        w[t as usize].store(i + 1, std::sync::atomic::Ordering::Release);
                    }
                    if i % 256 == 0 {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
}

fn check_record_integrity(r: &ncclshim_format::reader::Record) -> (u64, u64) {
    let [t, i, x, ni, i3, t7, i8, magic, ti] = r.args;
    assert_eq!(
        (x, ni, i3, t7, i8, magic, ti),
        (t ^ i, !i, i * 3, t + 7, i << 8, 0xabcd, t * i),
        "record fields torn: {r:?}"
    );
    (t, i)
}

#[test]
fn many_threads_nothing_lost_or_duplicated() {
    if role().is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rec: &'static Recorder = Box::leak(Box::new(
        Recorder::create(&stress_config(dir.path())).unwrap(),
    ));
    write_from_threads(rec, None);
    let dump = read_dump(rec.path()).unwrap();
    assert_eq!(dump.summary.records, THREADS * PER_THREAD);
    assert_eq!(
        (dump.summary.torn, dump.summary.lost, dump.summary.in_flight),
        (0, 0, 0)
    );
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for r in &dump.records {
        let (t, i) = check_record_integrity(r);
        assert_eq!(r.rc, (i % 7) as i32);
        seen.entry(t).or_default().push(i);
    }
    for t in 0..THREADS {
        let v = &seen[&t];
        assert_eq!(v.len() as u64, PER_THREAD, "thread {t}");
        assert!(
            v.iter().copied().eq(0..PER_THREAD),
            "thread {t} out of order or duplicated"
        );
    }
}

#[test]
fn role_sigkill_writer() {
    if role().as_deref() != Some("sigkill") {
        return;
    }
    let dir = PathBuf::from(std::env::var("NCCLSHIM_DIR").unwrap());
    let witness_path = dir.join("witness");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&witness_path)
        .unwrap();
    f.set_len(THREADS * 8).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: mapping a file of exactly THREADS * 8 bytes shared and writable; the mapping is
    // leaked and lives until the process is killed.
    let witness = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            (THREADS * 8) as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::slice::from_raw_parts(p as *const std::sync::atomic::AtomicU64, THREADS as usize)
    };
    let rec: &'static Recorder =
        Box::leak(Box::new(Recorder::create(&stress_config(&dir)).unwrap()));
    println!("READY");
    write_from_threads(rec, Some(witness));
    // Finished before the kill: wait for it anyway.
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn sigkill_at_random_moment_keeps_every_committed_record() {
    if role().is_some() {
        return;
    }
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut c = child("sigkill", "role_sigkill_writer");
        c.env("NCCLSHIM_DIR", dir.path()).stdout(Stdio::piped());
        // Both time bases: the first round with CLOCK_MONOTONIC, the others automatic (TSC
        // where the CPU and kernel allow it).
        if round == 0 {
            c.env("NCCLSHIM_CLOCK", "monotonic");
        }
        let mut proc = c.spawn().unwrap();
        // Wait until the recorder exists, then kill after a pseudo-random delay.
        let mut out = std::io::BufReader::new(proc.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("READY") {
            line.clear();
            use std::io::BufRead;
            assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
        std::thread::sleep(Duration::from_micros(
            2_000 + (nanos ^ (round * 7919)) % 40_000,
        ));
        // SAFETY: sending SIGKILL to our own child.
        unsafe { libc::kill(proc.id() as i32, libc::SIGKILL) };
        let status = proc.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));

        let witness = std::fs::read(dir.path().join("witness")).unwrap();
        let committed: Vec<u64> = witness
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        eprintln!("round {round}: committed per thread at SIGKILL: {committed:?}");
        let files = dumps_in(dir.path());
        assert_eq!(files.len(), 1);
        let dump = read_dump(&files[0]).unwrap();
        assert!(!dump.header.clean_exit);
        let mut per_thread: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for r in &dump.records {
            let (t, i) = check_record_integrity(r);
            per_thread.entry(t).or_default().push(i);
        }
        for (t, &w) in committed.iter().enumerate() {
            let got = per_thread.remove(&(t as u64)).unwrap_or_default();
            assert!(
                got.len() as u64 >= w,
                "thread {t}: witness {w}, dump has {}",
                got.len()
            );
            assert!(
                got.iter().copied().eq(0..got.len() as u64),
                "thread {t}: gap in records"
            );
        }
        for ring in &dump.rings {
            assert!(
                ring.torn <= 1,
                "ring {} has {} torn slots",
                ring.index,
                ring.torn
            );
        }
        // A thread killed between entry and completion leaves its last call in flight.
        let in_flight: Vec<_> = dump.records.iter().filter(|r| r.in_flight()).collect();
        assert!(in_flight.len() as u64 <= THREADS);
        for r in in_flight {
            let last = dump
                .records
                .iter()
                .filter(|o| o.ring == r.ring)
                .map(|o| o.seq)
                .max();
            assert_eq!(
                Some(r.seq),
                last,
                "only a thread's last call can be in flight"
            );
        }
    }
}

static FORK_RECORDER: ProcessRecorder = ProcessRecorder::new(WriterKind::Synthetic, 0);

fn note(tag: u64) {
    FORK_RECORDER
        .with_ring(|_, ring| {
            let mut e = Entry::new(RecordKind::Event, CallId::Test);
            e.args[0] = tag;
            ring.instant(&e);
        })
        .expect("recording");
}

#[test]
fn role_forking_writer() {
    if role().as_deref() != Some("fork") {
        return;
    }
    note(1);
    // SAFETY: the child only records (async-signal-unsafe work is fine: this test process has
    // no other threads holding locks at the fork) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        note(100);
        note(101);
        // SAFETY: terminating the forked child without running the parent's atexit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    note(2);
    println!("CHILD={pid}");
}

#[test]
fn forked_child_writes_its_own_file() {
    if role().is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = child("fork", "role_forking_writer")
        .env("NCCLSHIM_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let child_pid: u32 = stdout
        .lines()
        .find_map(|l| l.split("CHILD=").nth(1))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let files = dumps_in(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");
    let dumps: Vec<_> = files.iter().map(|f| read_dump(f).unwrap()).collect();
    let (kid, parent): (Vec<_>, Vec<_>) = dumps.iter().partition(|d| d.header.pid == child_pid);
    let tags =
        |d: &ncclshim_format::reader::Dump| d.records.iter().map(|r| r.args[0]).collect::<Vec<_>>();
    assert_eq!(tags(kid[0]), vec![100, 101]);
    assert_eq!(tags(parent[0]), vec![1, 2]);
    assert!(
        parent[0].header.clean_exit,
        "atexit marks the parent's clean exit"
    );
    assert!(!kid[0].header.clean_exit, "_exit skips atexit");
}

#[test]
fn role_unwritable_dir() {
    if role().as_deref() != Some("unwritable") {
        return;
    }
    let recorded = FORK_RECORDER.with_ring(|_, _| ()).is_some();
    let again = FORK_RECORDER.with_ring(|_, _| ()).is_some();
    println!("program output intact recorded={recorded} again={again}");
}

fn run_unwritable(dir: &str, extra: &[(&str, &str)]) {
    let mut c = child("unwritable", "role_unwritable_dir");
    c.env("NCCLSHIM_DIR", dir);
    for (k, v) in extra {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("program output intact recorded=false again=false"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("ncclshim:"))
        .collect();
    assert_eq!(lines.len(), 1, "exactly one line on stderr: {stderr}");
    assert!(lines[0].contains("recording disabled"), "{}", lines[0]);
}

#[test]
fn unwritable_dump_directory_leaves_the_program_running() {
    if role().is_some() {
        return;
    }
    // Root ignores permission bits, so use places nobody can create files in.
    run_unwritable("/proc/self/ncclshim-cannot-exist", &[]);
    run_unwritable("/dev/null/ncclshim", &[]);
}

/// Runs `c` with `RLIMIT_FSIZE` at `bytes`: the file cannot grow past it, exactly as on a
/// full disk (the writer checks the limit first, so the process never gets SIGXFSZ).
fn with_file_size_limit(c: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        c.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &rl);
            Ok(())
        });
    }
}

#[test]
fn full_disk_leaves_the_program_running() {
    if role().is_some() {
        return;
    }
    // A file-size limit below the fixed part fails the creation as a full disk would; the
    // file must not be left behind.
    let dir = tempfile::tempdir().unwrap();
    let mut c = child("unwritable", "role_unwritable_dir");
    c.env("NCCLSHIM_DIR", dir.path());
    with_file_size_limit(&mut c, 64 << 10);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("program output intact recorded=false again=false"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("ncclshim:"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        dumps_in(dir.path()).is_empty(),
        "the half-made file is removed"
    );
}

#[test]
fn role_ring_alloc_fails() {
    if role().as_deref() != Some("ring_alloc") {
        return;
    }
    let rec: &'static Recorder = Box::leak(Box::new(
        Recorder::create(&RecorderConfig::defaults(
            WriterKind::Synthetic,
            std::env::var_os("NCCLSHIM_DIR").unwrap().into(),
        ))
        .unwrap(),
    ));
    std::thread::scope(|s| {
        for t in 0..3u64 {
            s.spawn(move || {
                let ring = rec.claim_ring();
                let mut e = Entry::new(RecordKind::Call, CallId::Test);
                e.args[0] = t;
                ring.begin(&e).complete(0);
            });
        }
    });
    println!("program output intact");
}

#[test]
fn a_ring_that_cannot_be_allocated_sends_its_thread_to_the_overflow_ring() {
    if role().is_some() {
        return;
    }
    // Room for the fixed part only: every ring claim fails like on a full disk.
    let dir = tempfile::tempdir().unwrap();
    let mut c = child("ring_alloc", "role_ring_alloc_fails");
    c.env("NCCLSHIM_DIR", dir.path());
    with_file_size_limit(&mut c, 320 << 10);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("program output intact"));
    let files = dumps_in(dir.path());
    assert_eq!(files.len(), 1);
    let d = read_dump(&files[0]).unwrap();
    assert_eq!(d.header.ring_alloc_failed, 3);
    assert_eq!(d.header.rings_materialized, 0);
    assert_ne!(
        d.header.flags & ncclshim_dump::layout::flags::ALLOC_FAILED,
        0
    );
    let mut tags: Vec<u64> = d.records.iter().map(|r| r.args[0]).collect();
    tags.sort();
    assert_eq!(
        tags,
        vec![0, 1, 2],
        "every thread's record is in the overflow ring"
    );
    assert!(d.rings.iter().all(|r| r.shared || r.records == 0));
    assert!(std::fs::metadata(&files[0]).unwrap().len() <= 320 << 10);
}
