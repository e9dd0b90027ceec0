#!/usr/bin/env bash
# Builds the release tarball for machines without pip: the same files as the wheel (glibc 2.17,
# stripped; scripts/build-wheel.sh), laid out as a prefix:
#
#   ncclshim-<version>-x86_64-linux/bin/ncclshim
#   ncclshim-<version>-x86_64-linux/lib/libncclshim.so
#   ncclshim-<version>-x86_64-linux/lib/libnccl-profiler-ncclshim.so   (and libnccl_profiler_ncclshim.so)
#
# `ncclshim run` finds lib/ from bin/ by itself, wherever the tree is unpacked (docs/install.md).
#   scripts/build-tarball.sh [WHEEL]   (without WHEEL: scripts/build-wheel.sh builds it)
# Prints the tarball's path: target/dist/ncclshim-<version>-x86_64-linux.tar.gz
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
wheel="${1:-$(bash scripts/build-wheel.sh | tail -n1)}"
version="$(basename "$wheel" | cut -d- -f2)"
name="ncclshim-$version-x86_64-linux"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m zipfile -e "$wheel" "$work/whl"
mkdir -p "$work/$name/bin" "$work/$name/lib"
install -m 0755 "$work/whl/ncclshim-$version.data/scripts/ncclshim" "$work/$name/bin/"
install -m 0755 "$work/whl/ncclshim/lib/"*.so "$work/$name/lib/"
mkdir -p "$root/target/dist"
tarball="$root/target/dist/$name.tar.gz"
tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$tarball" "$name"
echo "$tarball"
