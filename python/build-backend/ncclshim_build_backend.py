"""PEP 517 build backend of the `ncclshim` Python package: maturin, plus the two recorder libraries.

Why a wrapper: maturin packs one Rust crate into a wheel, here the `ncclshim` executable of the
collector-cli crate (`bindings = "bin"`), together with the Python files under python/ncclshim. The
wheel must also carry two cdylibs of other crates, libncclshim.so (ncclshim-shim) and the NCCL
profiler plugin (ncclshim-profiler), and maturin has no hook to build them. So this backend builds
them with cargo, copies them into python/ncclshim/lib/ (the plugin under both of its names) and
then hands over to maturin, which packs that directory with the Python files. Everything else
(metadata, the sdist, the executable, the platform tag) is maturin's.

It runs for `pip install .` from a checkout and `pip install ncclshim-<version>.tar.gz` (a build
on the user's machine, against its own glibc). The release wheel is built by scripts/build-wheel.sh,
which builds the libraries against glibc 2.17 itself and stages them with this file's command line:

    python3 python/build-backend/ncclshim_build_backend.py stage DIR   (DIR: where the .so files are)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import maturin
from maturin import (  # noqa: F401 - re-exported: the rest of the PEP 517 interface is maturin's
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

#: cargo's file name of each library -> the names it gets in the package.
LIBRARIES = {
    "libncclshim.so": ["libncclshim.so"],
    # NCCL derives libnccl-profiler-<name>.so from NCCL_PROFILER_PLUGIN=<name>; cargo cannot put a
    # '-' in a library's file name, so the plugin is carried under both.
    "libnccl_profiler_ncclshim.so": ["libnccl-profiler-ncclshim.so", "libnccl_profiler_ncclshim.so"],
}
ROOT = Path(__file__).resolve().parent.parent.parent
STAGE = ROOT / "python" / "ncclshim" / "lib"


def _log(msg: str) -> None:
    print(f"ncclshim build: {msg}", file=sys.stderr, flush=True)


def stage(built: Path) -> None:
    """Copies the libraries from `built` into the package, stripped of their debug information
    when `strip` is there (a missing `strip` only makes the wheel larger)."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    strip = shutil.which("strip")
    for source_name, names in LIBRARIES.items():
        source = built / source_name
        if not source.is_file():
            raise SystemExit(f"ncclshim build: {source} was not built")
        for name in names:
            dest = STAGE / name
            shutil.copyfile(source, dest)
            if strip:
                # Dynamic symbols (what the loader and NCCL look up) always stay.
                subprocess.run([strip, "--strip-debug", str(dest)], check=True)
            dest.chmod(0o755)
    _log(f"staged {', '.join(sorted(p.name for p in STAGE.iterdir()))} in {STAGE}")


def build_libraries() -> Path:
    """`cargo build --release` of the two library crates; returns the directory they are in."""
    cargo = os.environ.get("CARGO", "cargo")
    meta = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
    )
    target = Path(json.loads(meta.stdout)["target_directory"])
    _log("building libncclshim.so and the profiler plugin (cargo build --release)")
    subprocess.run(
        [cargo, "build", "--release", "-p", "ncclshim-shim", "-p", "ncclshim-profiler"],
        cwd=ROOT,
        check=True,
    )
    return target / "release"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    stage(build_libraries())
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    stage(build_libraries())
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "stage":
        raise SystemExit("usage: ncclshim_build_backend.py stage DIR")
    stage(Path(sys.argv[2]))
