#!/usr/bin/env bash
# Builds the NCCL profiler plugin and provides it under the name NCCL derives from
# NCCL_PROFILER_PLUGIN=ncclshim, i.e. libnccl-profiler-ncclshim.so, next to cargo's
# libnccl_profiler_ncclshim.so (cargo cannot put a '-' in a library file name).
#
#   scripts/install-plugin.sh [--release] [--no-build] [DEST_DIR]
#
# --no-build: the library is already built (scripts/setup.sh after `cargo build --workspace`); only
# the alias is made.
#
# Without DEST_DIR the alias is a symlink in target/<profile>/. With DEST_DIR the library is
# copied there under the NCCL name (e.g. a directory on LD_LIBRARY_PATH, or pass the absolute
# path in NCCL_PROFILER_PLUGIN).
set -euo pipefail

profile=debug
cargo_flags=()
if [[ "${1:-}" == "--release" ]]; then
    profile=release
    cargo_flags+=(--release)
    shift
fi
build=1
if [[ "${1:-}" == "--no-build" ]]; then
    build=0
    shift
fi
dest="${1:-}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $build -eq 1 ]]; then
    cargo build -p ncclshim-profiler --lib "${cargo_flags[@]}"
fi

target_dir="$(cargo metadata --format-version 1 --no-deps 2>/dev/null \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
target_dir="${target_dir:-$root/target}"
built="$target_dir/$profile/libnccl_profiler_ncclshim.so"
[[ -f "$built" ]] || { echo "install-plugin: $built was not built" >&2; exit 1; }

ln -sf libnccl_profiler_ncclshim.so "$target_dir/$profile/libnccl-profiler-ncclshim.so"
echo "$target_dir/$profile/libnccl-profiler-ncclshim.so"

if [[ -n "$dest" ]]; then
    mkdir -p "$dest"
    install -m 0755 "$built" "$dest/libnccl-profiler-ncclshim.so"
    echo "$dest/libnccl-profiler-ncclshim.so"
fi
