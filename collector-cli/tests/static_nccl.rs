//! NCCL the shim cannot see, through the real path: `ncclshim run` preloads the real
//! `libncclshim.so` and selects the real profiler plugin for a job whose NCCL is torchcomms'
//! NCCLX, linked statically into an extension with every symbol renamed `torchcomms_nccl*`
//! (the NCCLX TEST DOUBLE `tests/doubles/ncclx/ncclx_double.c`, loaded `RTLD_LOCAL` by
//! `tests/c/ncclx_job.c` as Python imports an extension). No NCCL call reaches the shim; NCCL
//! inside still loads the plugin and reaches the driver (the libcuda TEST DOUBLE). `report` and
//! `doctor DIR` must say that the shim could not see NCCL's calls and why, instead of reading the
//! empty shim dump as "this process never called NCCL".

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::native::{cc, ensure_shim, root};

/// The profiler plugin next to the `ncclshim` binary, where `run` looks for it.
fn ensure_plugin() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ncclshim"));
    let dir = bin.parent().unwrap();
    if !dir.join("libnccl_profiler_ncclshim.so").exists()
        && !dir.join("libnccl-profiler-ncclshim.so").exists()
    {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "ncclshim-profiler"])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(st.success());
    }
}

struct Job {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    libdir: PathBuf,
    prog: PathBuf,
    ncclx: PathBuf,
}

fn build(tmp: tempfile::TempDir) -> Job {
    let t = tmp.path();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &s(&t.join("libcuda.so.1")),
        &s(&root().join("tests/doubles/libcuda/libcuda_double.c")),
    ]);
    let ncclx = t.join("_comms_ncclx_double.so");
    cc(&[
        "-Wall",
        "-shared",
        "-fPIC",
        "-o",
        &s(&ncclx),
        &s(&root().join("tests/doubles/ncclx/ncclx_double.c")),
        "-ldl",
    ]);
    let prog = t.join("ncclx_job");
    cc(&[
        "-Wall",
        "-o",
        &s(&prog),
        &s(&root().join("tests/c/ncclx_job.c")),
        "-ldl",
    ]);
    Job {
        dir: t.join("dumps"),
        libdir: t.to_path_buf(),
        prog,
        ncclx,
        _tmp: tmp,
    }
}

fn ncclshim(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .args(args)
        .env_remove("NCCL_PROFILER_PLUGIN")
        .output()
        .unwrap()
}

/// Runs the job under `ncclshim run` (`extra`: more `run` options); returns its output.
fn run_job(job: &Job, extra: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclshim"))
        .arg("run")
        .args(extra)
        .arg("--dir")
        .arg(&job.dir)
        .arg("--")
        .arg(&job.prog)
        .arg(&job.ncclx)
        .env("LD_LIBRARY_PATH", &job.libdir)
        .env("LIBCUDA_DOUBLE_IMPORT_RC", "101")
        .env_remove("NCCL_PROFILER_PLUGIN")
        .env_remove("NCCLSHIM_DISABLE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ncclx version 22703"), "{stdout}");
    assert!(stdout.contains("driver import rc=101"), "{stdout}");
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn renamed_nccl_seen_only_by_the_plugin_is_said_by_report_and_doctor() {
    ensure_shim();
    ensure_plugin();
    let job = build(tempfile::tempdir().unwrap());
    let out = run_job(&job, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("init rc=0"), "NCCL's plugin load: {stdout}");

    let dir = job.dir.as_os_str();
    // The shim's own dump says it in its header (the format's NCCL_STATIC flag) and names the
    // object in its library snapshot.
    let shim_dump = std::fs::read_dir(&job.dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".shim.ncclshim"))
        .expect("a shim dump (created at the first driver call)");
    let raw = text(&ncclshim(&["dump".as_ref(), shim_dump.as_os_str()]));
    let header: serde_json::Value = serde_json::from_str(raw.lines().next().unwrap()).unwrap();
    assert_eq!(header["header"]["nccl_static"], true, "{raw}");
    assert!(
        raw.contains("torchcomms_pncclGetVersion") && raw.contains("nccl_embedded"),
        "{raw}"
    );

    let report = ncclshim(&["report".as_ref(), dir]);
    let report_text = text(&report);
    let object = job.ncclx.display().to_string();
    let want = format!(
        "this process ran NCCL 2.27.3 (the profiler plugin saw it) but no NCCL API call reached the shim: NCCL is linked statically or renamed (torchcomms_pncclGetVersion exported by {object})"
    );
    assert!(report_text.contains(&want), "{report_text}");
    // The driver's record still stands: the failed import is the first failure. It is not
    // called the application's own (outside NCCL): NCCL's calls were not seen, so NCCL may have
    // made it.
    assert!(
        report_text.contains("first failure: rank 0")
            && report_text.contains("cuMemImportFromShareableHandle returned 101"),
        "{report_text}"
    );
    assert!(
        !report_text.contains("outside any NCCL call"),
        "{report_text}"
    );

    let json = ncclshim(&["report".as_ref(), "--json".as_ref(), dir]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let gaps = v["evidence_gaps"].as_array().unwrap();
    let gap = gaps
        .iter()
        .find(|g| g["values"]["gap"] == "nccl_calls_invisible")
        .unwrap_or_else(|| panic!("{gaps:#?}"));
    assert_eq!(gap["values"]["plugin_saw_nccl"], true);
    assert_eq!(gap["values"]["nccl_object"], object.as_str());
    assert_eq!(gap["processes"].as_array().unwrap().len(), 1);

    let doctor = ncclshim(&["doctor".as_ref(), dir]);
    let doctor_text = text(&doctor);
    assert!(doctor_text.contains(&want), "{doctor_text}");
    let dj = ncclshim(&["doctor".as_ref(), "--json".as_ref(), dir]);
    let dv: serde_json::Value = serde_json::from_slice(&dj.stdout).unwrap();
    let check = dv["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "nccl-visible")
        .unwrap_or_else(|| panic!("{dv:#}"));
    assert_eq!(check["status"], "warn");
    assert!(check["remedy"]
        .as_str()
        .unwrap()
        .contains("profiler plugin"));
}

/// Without the plugin nothing shows NCCL ran, but the shim found the renamed copy itself: the
/// report says what that copy hides, and how to see it.
#[test]
fn renamed_nccl_without_the_plugin_is_still_named() {
    ensure_shim();
    let job = build(tempfile::tempdir().unwrap());
    let out = run_job(&job, &["--no-plugin"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no profiler plugin"),
        "{}",
        text(&out)
    );
    let report = text(&ncclshim(&["report".as_ref(), job.dir.as_os_str()]));
    assert!(
        report.contains(&format!(
            "no NCCL API call reached the shim, and this process holds NCCL 2.27.3 linked statically or renamed (torchcomms_pncclGetVersion exported by {})",
            job.ncclx.display()
        )),
        "{report}"
    );
}

/// A job whose NCCL the shim does see (the real PyPI libnccl, its `ncclGetUniqueId` failing for
/// real) has no such gap, nor a doctor warning.
#[test]
fn nccl_the_shim_sees_is_not_called_invisible() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dumps");
    support::native::failed_unique_id_job(tmp.path(), &dir);
    let json = ncclshim(&["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        !v["evidence_gaps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["values"]["gap"] == "nccl_calls_invisible"),
        "{v:#}"
    );
    let doctor = text(&ncclshim(&["doctor".as_ref(), dir.as_os_str()]));
    assert!(doctor.contains("called it through the shim"), "{doctor}");
}
