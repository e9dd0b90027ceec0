//! Where `ncclshim run` looks for the recorder libraries (`libncclshim.so`, the profiler plugin)
//! that belong to this `ncclshim` executable, for every way it is installed:
//!
//! | install | executable | libraries |
//! |---|---|---|
//! | `$NCCLSHIM_LIB_DIR` (set by `python -m ncclshim`, or by hand) | anywhere | that directory |
//! | cargo build | `target/<profile>/ncclshim` | same directory (or its `deps/`) |
//! | release tarball; `cargo install --root P` + copying the libraries | `P/bin/ncclshim` | `P/lib/` |
//! | `pip install ncclshim` (venv, `--user`, system, conda) | `P/bin/ncclshim` | `P/lib*/python3.*/{site,dist}-packages/ncclshim/lib/` |
//! | `pip install --target T` | `T/bin/ncclshim` | `T/ncclshim/lib/` |
//!
//! pip puts the executable in the scheme's scripts directory and the package in its
//! site-packages, which on Linux is always `<prefix>/bin` beside `<prefix>/lib/pythonX.Y/...`;
//! the Python version in between is not known to the executable, so every `python3.*` directory is
//! a candidate, those whose `ncclshim-<our version>.dist-info` is there first (a prefix may hold
//! the package for several Pythons, in different versions).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable naming the directory of the libraries, ahead of every other place.
pub const LIB_DIR_VARIABLE: &str = "NCCLSHIM_LIB_DIR";

/// The directories to search, best first, for the executable at `exe` (canonical) and the value
/// of [`LIB_DIR_VARIABLE`]. Directories that do not exist may be among them.
pub fn candidates(exe: &Path, lib_dir_variable: Option<OsString>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = lib_dir_variable.filter(|v| !v.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    let Some(bin) = exe.parent() else {
        return dirs;
    };
    dirs.push(bin.to_path_buf());
    let prefix = bin.parent();
    if let Some(prefix) = prefix {
        dirs.push(prefix.join("lib"));
    }
    // Under `cargo test` the binary is in target/<profile>/ while the freshly built cdylibs may
    // only be in target/<profile>/deps/ (cargo does not always copy them up).
    dirs.push(bin.join("deps"));
    let Some(prefix) = prefix else {
        return dirs;
    };
    dirs.extend(python_package_dirs(prefix));
    dirs.push(prefix.join("ncclshim").join("lib"));
    dirs
}

/// `<prefix>/lib*/python3*/{site,dist}-packages/ncclshim/lib`, those installed with this
/// version's metadata first, then by name (deterministic).
fn python_package_dirs(prefix: &Path) -> Vec<PathBuf> {
    let dist_info = format!("ncclshim-{}.dist-info", env!("CARGO_PKG_VERSION"));
    let mut found: Vec<(bool, PathBuf)> = Vec::new();
    for libdir in subdirs(prefix, |n| n.starts_with("lib")) {
        for python in subdirs(&libdir, |n| n.starts_with("python3")) {
            for packages in subdirs(&python, |n| n == "site-packages" || n == "dist-packages") {
                let dir = packages.join("ncclshim").join("lib");
                if dir.is_dir() {
                    found.push((!packages.join(&dist_info).is_dir(), dir));
                }
            }
        }
    }
    found.sort();
    found.into_iter().map(|(_, d)| d).collect()
}

/// The directories directly under `dir` whose names pass `keep` (none when it cannot be read).
fn subdirs(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }

    #[test]
    fn a_pip_prefix_is_searched_with_this_version_first() {
        let t = tempfile::tempdir().unwrap();
        let prefix = t.path();
        let exe = prefix.join("bin/ncclshim");
        touch(&exe);
        let old = prefix.join("lib/python3.10/site-packages");
        let ours = prefix.join("lib/python3.12/site-packages");
        let debian = prefix.join("lib/python3/dist-packages");
        for p in [&old, &ours, &debian] {
            touch(&p.join("ncclshim/lib/libncclshim.so"));
        }
        std::fs::create_dir_all(old.join("ncclshim-0.0.1.dist-info")).unwrap();
        std::fs::create_dir_all(
            ours.join(format!("ncclshim-{}.dist-info", env!("CARGO_PKG_VERSION"))),
        )
        .unwrap();
        let dirs = candidates(&exe, None);
        let pos = |d: &Path| dirs.iter().position(|c| c == d);
        let (ours, old, debian) = (
            pos(&ours.join("ncclshim/lib")).expect("this version's package"),
            pos(&old.join("ncclshim/lib")).expect("another version's package"),
            pos(&debian.join("ncclshim/lib")).expect("Debian's dist-packages"),
        );
        assert!(ours < old && ours < debian, "{dirs:?}");
        // The tarball layout comes before any Python package.
        assert!(pos(&prefix.join("lib")).unwrap() < ours);
    }

    #[test]
    fn the_variable_comes_first_and_the_target_layout_last() {
        let t = tempfile::tempdir().unwrap();
        let exe = t.path().join("bin/ncclshim");
        let dirs = candidates(&exe, Some("/opt/ncclshim/lib".into()));
        assert_eq!(dirs.first(), Some(&PathBuf::from("/opt/ncclshim/lib")));
        assert_eq!(dirs.last(), Some(&t.path().join("ncclshim/lib")));
        assert_eq!(
            candidates(&exe, Some(OsString::new())).first(),
            Some(&t.path().join("bin")),
            "an empty variable is unset"
        );
    }
}
