//! The real GPU captures under `tests/fixtures/real-gpu/<capture>/` (one `NAME.tar.gz` a case,
//! with `cases.json` and `fr_trace.txt`), unpacked into a fresh temporary directory for a test:
//! the archives stay as they were committed and no two tests share an unpacked tree.

use std::path::{Path, PathBuf};

/// `tests/fixtures/real-gpu`: one folder a capture (a GPU run's date, and the machine where one
/// day had several).
pub fn real_gpu_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real-gpu")
}

/// Unpacks `capture_dir/NAME.tar.gz` into a fresh directory; returns its guard (the directory
/// lives as long as it does) and the case folder `NAME/` inside (dumps/, logs/,
/// flight-recorder/, as the capture holds them).
pub fn unpack_case(capture_dir: &Path, name: &str) -> (tempfile::TempDir, PathBuf) {
    let archive = capture_dir.join(format!("{name}.tar.gz"));
    let file =
        std::fs::File::open(&archive).unwrap_or_else(|e| panic!("{}: {e}", archive.display()));
    let dir = tempfile::tempdir().expect("a temporary directory");
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(dir.path())
        .unwrap_or_else(|e| panic!("{}: {e}", archive.display()));
    let case = dir.path().join(name);
    (dir, case)
}

/// Every real GPU capture's case names, by capture folder, both sorted.
pub fn real_gpu_case_names() -> Vec<(PathBuf, Vec<String>)> {
    let mut captures: Vec<PathBuf> = std::fs::read_dir(real_gpu_root())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    captures.sort();
    captures
        .into_iter()
        .map(|capture| {
            let mut names: Vec<String> = std::fs::read_dir(&capture)
                .unwrap()
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".tar.gz")
                        .map(str::to_owned)
                })
                .collect();
            names.sort();
            (capture, names)
        })
        .collect()
}

/// The committed dump fixture folders (real captures without a GPU, synthetic jobs, the
/// profiler's synthetic jobs), sorted.
pub fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = Vec::new();
    for parent in [
        "tests/fixtures/real",
        "tests/fixtures/synthetic",
        "profiler-plugin/tests/fixtures/synthetic",
    ] {
        if let Ok(entries) = std::fs::read_dir(root.join(parent)) {
            dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    dirs.sort();
    dirs
}
