#!/usr/bin/env bash
# Downloads the PyPI NCCL wheels the shim's tests run against and extracts libnccl.so.2 and nccl.h.
# Idempotent: a wheel already extracted is not fetched again. pip is that of the project's own virtual
# environment (scripts/tools-venv.sh), never the system's (PEP 668 distributions have none to use).
#   .cache/nccl/cu12/lib/libnccl.so.2   newest nvidia-nccl-cu12 (>= 2.31)
#   .cache/nccl/cu11/lib/libnccl.so.2   nvidia-nccl-cu11==2.21.5
# Usage: scripts/fetch-nccl.sh [cache-dir]   (default: <repo>/.cache/nccl)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-$root/.cache/nccl}"
mkdir -p "$cache"

fetch() { # name spec version size
    local name="$1" spec="$2" want="$3" size="$4" dir="$cache/$1"
    if [[ -f "$dir/lib/libnccl.so.2" && "$(cat "$dir/VERSION" 2>/dev/null)" == "$want" ]]; then
        return 0
    fi
    local venv tmp
    venv="$(bash "$root/scripts/tools-venv.sh" | tail -n1)"
    echo "fetch-nccl: downloading $spec from PyPI ($size, once) for libnccl.so.2 -> $dir" >&2
    tmp="$(mktemp -d "$cache/.dl.XXXXXX")"
    # A failed download must not leave half a wheel behind.
    trap 'rm -rf "$tmp"' RETURN
    # Not --quiet: pip's "Downloading <wheel> (<size>)" line is the progress shown.
    "$venv/bin/python" -m pip download --progress-bar off --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_18_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$tmp" "$spec" >&2
    local whl
    whl="$(ls "$tmp"/*.whl | head -n1)"
    "$venv/bin/python" - "$whl" "$tmp/x" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        base = os.path.basename(n)
        if base in ("libnccl.so.2", "nccl.h"):
            dst = os.path.join(out, "lib" if base.endswith(".2") else "include", base)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(n) as src, open(dst, "wb") as f:
                f.write(src.read())
PY
    basename "$whl" | cut -d- -f2 > "$tmp/x/VERSION"
    rm -rf "$dir"
    mv "$tmp/x" "$dir"
    rm -rf "$tmp"
}

# Pinned, so every machine tests the same binaries: the newest cu12 release and the last cu11 one.
# Sizes: the x86_64 wheels' sizes in PyPI's index (2026-11-27), shown before the download starts.
fetch cu12 "nvidia-nccl-cu12==2.32.3" 2.32.3 "352 MB"
fetch cu11 "nvidia-nccl-cu11==2.21.5" 2.21.5 "148 MB"
for d in cu12 cu11; do echo "$d $(cat "$cache/$d/VERSION") $cache/$d/lib/libnccl.so.2"; done
