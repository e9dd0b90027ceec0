#!/usr/bin/env bash
# Builds the pip package `ncclshim` (pyproject.toml): one wheel for every x86-64 Linux with glibc
# >= 2.17 (manylinux2014), release-built and stripped, holding the `ncclshim` executable,
# libncclshim.so, the profiler plugin under both of its names and the Python module.
#
#   scripts/build-wheel.sh          builds target/wheels/ncclshim-<version>-py3-none-manylinux*.whl
#                                   and prints its path (the last line of stdout)
#   scripts/build-wheel.sh --sdist  also builds the sdist target/wheels/ncclshim-<version>.tar.gz and
#                                   a wheel from it the way pip does for a user (PEP 517, through
#                                   python/build-backend), checks what that wheel holds, and prints
#                                   the sdist's path
#
# The build tools (maturin, ziglang, cargo-zigbuild, auditwheel), pinned with hashes in
# scripts/tools-requirements.txt, live in the project's own virtual environment, target/tools-venv
# (scripts/tools-venv.sh); the system Python is left alone. The libraries are
# built against glibc 2.17 by scripts/build-shim-release.sh (cargo-zigbuild, what
# scripts/check-glibc-floor.sh checks), the executable by maturin --zig in its own target directory
# (target/wheel), so the two zig builds do not undo each other's build cache.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
sdist=0
[[ "${1:-}" == "--sdist" ]] && sdist=1

tools="$(bash scripts/tools-venv.sh --tools | tail -n1)"
# shellcheck source=scripts/zig-env.sh
source scripts/zig-env.sh "$tools"

echo "build-wheel: libncclshim.so and the profiler plugin (glibc 2.17)" >&2
bash scripts/build-shim-release.sh >&2
"$tools/bin/python" python/build-backend/ncclshim_build_backend.py stage \
    target/x86_64-unknown-linux-gnu/release >&2

out="$root/target/wheels"
mkdir -p "$out"
rm -f "$out"/ncclshim-*.whl "$out"/ncclshim-*.tar.gz
echo "build-wheel: the ncclshim executable and the wheel (maturin --zig, manylinux2014)" >&2
# maturin's zig is the tools' ziglang (scripts/zig-env.sh); their bin first on PATH for the rest.
PATH="$tools/bin:$PATH" CARGO_TARGET_DIR="$root/target/wheel" \
    "$tools/bin/maturin" build --release --locked --strip --zig \
    --compatibility manylinux2014 --target x86_64-unknown-linux-gnu --out "$out" >&2
wheel="$(ls "$out"/ncclshim-*-manylinux*.whl)"

# Every file the package promises, in the wheel (maturin skips files it takes for stale artifacts).
check_members() { # wheel
    "$tools/bin/python" - "$1" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = ["ncclshim/__init__.py", "ncclshim/__main__.py", "ncclshim/lib/libncclshim.so",
        "ncclshim/lib/libnccl-profiler-ncclshim.so", "ncclshim/lib/libnccl_profiler_ncclshim.so"]
missing = [w for w in want if w not in names]
if not any(n.endswith(".data/scripts/ncclshim") for n in names):
    missing.append("<name>.data/scripts/ncclshim")
if missing:
    sys.exit(f"build-wheel: {sys.argv[1]} lacks {', '.join(missing)}")
PY
}
check_members "$wheel"

if [[ $sdist -eq 1 ]]; then
    echo "build-wheel: the sdist, and a wheel built from it by pip" >&2
    "$tools/bin/maturin" sdist --out "$out" >&2
    tarball="$(ls "$out"/ncclshim-*.tar.gz)"
    from_sdist="$out/from-sdist"
    rm -rf "$from_sdist"
    # A native build, as on a user's machine; its own target directory keeps it incremental.
    # (maturin's PEP 517 hooks run the `maturin` on PATH.)
    PATH="$tools/bin:$PATH" CARGO_TARGET_DIR="$root/target/sdist-build" "$tools/bin/python" -m pip wheel --quiet \
        --disable-pip-version-check --no-deps --no-build-isolation -w "$from_sdist" "$tarball" >&2
    check_members "$(ls "$from_sdist"/ncclshim-*.whl)"
    echo "build-wheel: $(ls "$from_sdist"/ncclshim-*.whl) built from the sdist" >&2
    echo "$tarball"
else
    echo "$wheel"
fi
