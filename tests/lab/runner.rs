//! Runs one scenario for real: builds its hosts ([`Fabric`]), starts every rank as a real
//! process inside its host's namespaces under `LD_PRELOAD=libncclshim.so`, plays the launcher
//! (timeout → SIGTERM → SIGKILL, or the user's Ctrl-C), then asks `ncclshim report --json`.

use crate::hosts::{host_dir, Fabric};
use crate::scenario::{bytes, Host, Scenario};
use crate::script::{render, RankPlace};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the lab is built from: the release shim and CLI (scripts/setup.sh) and the C programs.
pub struct Kit {
    pub root: PathBuf,
    pub shim: PathBuf,
    pub cli: PathBuf,
    /// The profiler plugin under the name NCCL derives (scripts/install-plugin.sh).
    pub profiler: PathBuf,
    pub bin: PathBuf,
}

fn cc(args: &[&str]) {
    let o = Command::new("cc").args(args).output().expect("cc");
    assert!(
        o.status.success(),
        "cc {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Kit {
    /// Compiles the scripted doubles and the rank driver into `bin`.
    pub fn build(root: &Path, bin: &Path) -> Kit {
        let rel = root.join("target/release");
        let shim = rel.join("libncclshim.so");
        let cli = rel.join("ncclshim");
        let profiler = rel.join("libnccl-profiler-ncclshim.so");
        for built in [&shim, &cli, &profiler] {
            assert!(
                built.exists(),
                "{} missing: run `bash scripts/setup.sh` first",
                built.display()
            );
        }
        std::fs::create_dir_all(bin).unwrap();
        let d = root.join("tests/doubles/lab");
        let p = |x: &Path| x.display().to_string();
        let out = |n: &str| p(&bin.join(n));
        cc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            &out("libnccl.so.2"),
            &p(&d.join("nccl_script_double.c")),
            "-ldl",
        ]);
        cc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            &out("libcuda.so.1"),
            &p(&d.join("cuda_script_double.c")),
        ]);
        cc(&[
            "-shared",
            "-fPIC",
            "-O2",
            "-DLAB_CUDART",
            "-o",
            &out("libcudart.so.12"),
            &p(&d.join("cuda_script_double.c")),
        ]);
        // An empty stand-in: only its presence on the loader path matters (host-facts' libibverbs check).
        std::fs::write(bin.join("empty.c"), "int lab_empty_library;\n").unwrap();
        // Empty stand-ins too: the network plugin (aws-ofi-nccl's file name) and libfabric, whose
        // presence in the process's maps is what the recorder sees.
        // And the MPI stack's (HPC-X's libmpi and its HCOLL collectives), loaded by a `load` step.
        for lib in [
            "libibverbs.so.1",
            "libnccl-net-ofi.so",
            "libfabric.so.1",
            "libmpi.so.40",
            "libhcoll.so.1",
        ] {
            cc(&["-shared", "-fPIC", "-o", &out(lib), &out("empty.c")]);
        }
        cc(&[
            "-O2",
            "-o",
            &out("lab_rank"),
            &p(&root.join("tests/c/lab_rank.c")),
            &format!("-L{}", bin.display()),
            "-l:libnccl.so.2",
            "-ldl",
        ]);
        Kit {
            root: root.to_path_buf(),
            shim,
            cli,
            profiler,
            bin: bin.to_path_buf(),
        }
    }

    /// The loader path of a simulated host: symlinks to the libraries it has.
    fn host_libs(&self, h: &Host, ns: &Path) {
        let host = &h.name;
        let lib = host_dir(ns, host).join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        let nccl = match h.nccl.as_str() {
            "script" => Some(self.bin.join("libnccl.so.2")),
            "cu12" | "cu11" => {
                let real = self
                    .root
                    .join(format!(".cache/nccl/{}/lib/libnccl.so.2", h.nccl));
                assert!(
                    real.exists(),
                    "{} missing: run `bash scripts/setup.sh`",
                    real.display()
                );
                Some(real)
            }
            _ => None,
        };
        if let Some(n) = nccl {
            std::os::unix::fs::symlink(n, lib.join("libnccl.so.2")).unwrap();
        }
        for l in &h.libraries {
            // `cu12/libnccl.so.2`: a second, real libnccl in a directory of its own (what a
            // pip-installed NCCL next to the framework's own looks like), loaded by a `load` step.
            let (src, dst) = match l.split_once('/') {
                Some((cu @ ("cu12" | "cu11"), "libnccl.so.2")) => {
                    std::fs::create_dir_all(lib.join(cu)).unwrap();
                    let real = format!(".cache/nccl/{cu}/lib/libnccl.so.2");
                    (self.root.join(real), lib.join(l))
                }
                _ => (self.bin.join(l), lib.join(l)),
            };
            assert!(src.exists(), "host {host}: no lab library {l}");
            std::os::unix::fs::symlink(src, dst).unwrap();
        }
    }
}

/// One finished scenario run.
pub struct Ran {
    pub report: Value,
    /// `ncclshim report`'s exit status (1: a failure was found).
    pub exit: Option<i32>,
    pub dir: PathBuf,
}

struct RankProc {
    child: Child,
    label: String,
    status: Option<String>,
}

impl Drop for RankProc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn signal(p: &RankProc, sig: i32) {
    // SAFETY: kill with a pid we spawned and have not reaped yet (status is None).
    unsafe { libc::kill(p.child.id() as i32, sig) };
}

pub fn run(kit: &Kit, s: &Scenario, dir: &Path) -> Result<Ran, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let ns = dir.join("ns");
    let libs = dir.join("lib");
    std::fs::create_dir_all(&libs).map_err(|e| e.to_string())?;
    for h in &s.hosts {
        kit.host_libs(h, &ns);
    }
    let fabric = Fabric::build(&s.hosts, &ns, &libs)?;
    let dumps = dir.join("dumps");
    let mut log = String::new();
    for run in s.runs() {
        let groups: Vec<_> = s.ranks.iter().filter(|g| g.run == run).collect();
        let world: u32 = groups.iter().map(|g| g.count).sum();
        let mut local: BTreeMap<&str, u32> = BTreeMap::new();
        let mut procs = Vec::new();
        let mut rank = 0;
        for g in &groups {
            for _ in 0..g.count {
                let lr = local.entry(g.host.as_str()).or_insert(0);
                let place = RankPlace {
                    rank,
                    local_rank: *lr,
                    world_size: world,
                };
                *lr += 1;
                let script = dir.join(format!("run{run}-rank{rank}.script"));
                // `{lib}` in a step: the host's loader directory (as the rank sees it).
                let text = render(g, &place).replace("{lib}", &libs.display().to_string());
                std::fs::write(&script, text).map_err(|e| e.to_string())?;
                let host = s.hosts.iter().find(|h| h.name == g.host).unwrap();
                let mut c = Command::new("nsenter");
                c.args([
                    "-t",
                    &fabric.pid_of(&g.host).to_string(),
                    "-u",
                    "-m",
                    "-n",
                    "--",
                ])
                .arg(kit.bin.join("lab_rank"))
                .current_dir(dir)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("LAB_SCRIPT", &script)
                .env("LD_LIBRARY_PATH", &libs)
                .env("LD_PRELOAD", &kit.shim)
                .env("NCCLSHIM_DIR", &dumps)
                // What torchrun hands every rank; a scenario's env may override it.
                .env("RANK", place.rank.to_string())
                .env("LOCAL_RANK", place.local_rank.to_string())
                .env("WORLD_SIZE", world.to_string());
                if s.profiler {
                    c.env("NCCL_PROFILER_PLUGIN", &kit.profiler);
                }
                for (k, v) in &g.env {
                    let v = v
                        .replace("{rank}", &place.rank.to_string())
                        .replace("{local_rank}", &place.local_rank.to_string())
                        .replace("{world_size}", &world.to_string());
                    c.env(k, v);
                }
                let out = std::fs::File::create(dir.join(format!("run{run}-rank{rank}.out")))
                    .map_err(|e| e.to_string())?;
                c.stdin(Stdio::null())
                    .stdout(out.try_clone().map_err(|e| e.to_string())?)
                    .stderr(out);
                if let Some(m) = &host.memlock {
                    let lim = if m == "unlimited" {
                        libc::RLIM_INFINITY
                    } else {
                        bytes(m)? as libc::rlim_t
                    };
                    // SAFETY: setrlimit is async-signal-safe and touches only the child.
                    unsafe {
                        c.pre_exec(move || {
                            let rl = libc::rlimit {
                                rlim_cur: lim,
                                rlim_max: lim,
                            };
                            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        })
                    };
                }
                let child = c.spawn().map_err(|e| format!("spawn rank {rank}: {e}"))?;
                procs.push(RankProc {
                    child,
                    label: format!("run {run} rank {rank} on {}", g.host),
                    status: None,
                });
                rank += 1;
            }
        }
        launcher(s, &mut procs);
        for p in &procs {
            log.push_str(&format!(
                "{}: {}\n",
                p.label,
                p.status.as_deref().unwrap_or("?")
            ));
        }
    }
    std::fs::write(dir.join("launcher.log"), &log).map_err(|e| e.to_string())?;
    drop(fabric);
    if s.profiler {
        // The scenario is about what the plugin saw: without its dumps the verdict would be the
        // shim's alone, so say so rather than judge it.
        let prof = std::fs::read_dir(&dumps)
            .map_err(|e| e.to_string())?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".prof.ncclshim"))
            .count();
        if prof == 0 {
            return Err(
                "profiler = true but the plugin wrote no dump (see the rank output)".into(),
            );
        }
    }
    let o = Command::new(&kit.cli)
        .args(["report"])
        .arg(&dumps)
        .arg("--json")
        .output()
        .map_err(|e| format!("ncclshim: {e}"))?;
    let report: Value = serde_json::from_slice(&o.stdout).map_err(|e| {
        format!(
            "ncclshim report --json gave no JSON ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    })?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    let exit = o.status.code();
    same_from_summary(kit, &dumps, dir, &report, exit)?;
    std::fs::write(
        dir.join("report.exit"),
        format!("{}\n", exit.map_or("signal".into(), |c| c.to_string())),
    )
    .map_err(|e| e.to_string())?;
    Ok(Ran {
        report,
        exit,
        dir: dir.to_path_buf(),
    })
}

/// The report on the scenario's summary (`ncclshim summarize`, as a node would write it) must be
/// the report on its dumps (issue 37): the same JSON and exit status. Flight Recorder dumps are
/// not carried in a summary, so they are named with `--flight-recorder`, and the one line saying
/// they were not carried is the only difference allowed.
fn same_from_summary(
    kit: &Kit,
    dumps: &Path,
    dir: &Path,
    direct: &Value,
    exit: Option<i32>,
) -> Result<(), String> {
    let summaries = dir.join("summaries");
    std::fs::create_dir_all(&summaries).map_err(|e| e.to_string())?;
    let o = Command::new(&kit.cli)
        .arg("summarize")
        .arg(dumps)
        .arg("-o")
        .arg(summaries.join("job.ncclshim-summary"))
        .output()
        .map_err(|e| format!("ncclshim summarize: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "ncclshim summarize failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let o = Command::new(&kit.cli)
        .arg("report")
        .arg(&summaries)
        .arg("--json")
        .arg("--flight-recorder")
        .arg(dumps)
        .output()
        .map_err(|e| format!("ncclshim: {e}"))?;
    let mut from_summary: Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| format!("report on the summary gave no JSON ({e})"))?;
    if let Some(problems) = from_summary
        .get_mut("problems")
        .and_then(Value::as_array_mut)
    {
        problems.retain(|p| {
            !p["error"]
                .as_str()
                .is_some_and(|e| e.contains("not carried in this summary"))
        });
    }
    if &from_summary == direct && o.status.code() == exit {
        return Ok(());
    }
    std::fs::write(
        dir.join("report-from-summary.json"),
        serde_json::to_string_pretty(&from_summary).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    Err(format!(
        "the report on the summary differs from the report on the dumps (exit {:?} vs {exit:?}; see report-from-summary.json beside report.json)",
        o.status.code()
    ))
}

/// Waits for the ranks like torchrun / Slurm: at the job timeout every rank still running gets
/// SIGTERM, and SIGKILL `kill_after_ms` later; `interrupt_ms` is the user's Ctrl-C (SIGINT).
fn launcher(s: &Scenario, procs: &mut [RankProc]) {
    let t0 = Instant::now();
    let l = &s.launcher;
    let (mut interrupted, mut termed, mut killed) = (false, false, false);
    loop {
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            if let Ok(Some(st)) = p.child.try_wait() {
                p.status = Some(format!("{st}"));
            }
        }
        if procs.iter().all(|p| p.status.is_some()) {
            return;
        }
        let ms = t0.elapsed().as_millis() as u64;
        let running = |procs: &mut [RankProc], sig| {
            for p in procs.iter().filter(|p| p.status.is_none()) {
                signal(p, sig);
            }
        };
        if let Some(i) = l.interrupt_ms {
            if !interrupted && ms >= i {
                interrupted = true;
                running(procs, libc::SIGINT);
            }
        }
        if !termed && ms >= l.timeout_ms {
            termed = true;
            running(procs, libc::SIGTERM);
        }
        if !killed && ms >= l.timeout_ms + l.kill_after_ms {
            killed = true;
            running(procs, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
