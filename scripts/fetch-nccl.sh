#!/usr/bin/env bash
# Downloads the PyPI NCCL wheels the shim's tests run against and extracts libnccl.so.2 and nccl.h.
# Idempotent: a wheel already extracted is not fetched again.
#   .cache/nccl/cu12/lib/libnccl.so.2   newest nvidia-nccl-cu12 (>= 2.31)
#   .cache/nccl/cu11/lib/libnccl.so.2   nvidia-nccl-cu11==2.21.5
# Usage: scripts/fetch-nccl.sh [cache-dir]   (default: <repo>/.cache/nccl)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-$root/.cache/nccl}"
mkdir -p "$cache"

fetch() { # name spec version
    local name="$1" spec="$2" want="$3" dir="$cache/$1"
    if [[ -f "$dir/lib/libnccl.so.2" && "$(cat "$dir/VERSION" 2>/dev/null)" == "$want" ]]; then
        return 0
    fi
    local tmp
    tmp="$(mktemp -d "$cache/.dl.XXXXXX")"
    # A failed download must not leave half a wheel behind.
    trap 'rm -rf "$tmp"' RETURN
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_18_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$tmp" "$spec" >&2
    local whl
    whl="$(ls "$tmp"/*.whl | head -n1)"
    python3 - "$whl" "$tmp/x" <<'PY'
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
fetch cu12 "nvidia-nccl-cu12==2.32.3" 2.32.3
fetch cu11 "nvidia-nccl-cu11==2.21.5" 2.21.5
for d in cu12 cu11; do echo "$d $(cat "$cache/$d/VERSION") $cache/$d/lib/libnccl.so.2"; done
