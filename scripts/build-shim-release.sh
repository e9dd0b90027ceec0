#!/usr/bin/env bash
# Builds the release cdylibs (libncclshim.so and the profiler plugin) against glibc 2.17, so they
# load on every distribution training clusters run, with cargo-zigbuild (zig from PyPI's `ziglang`).
# Output: target/x86_64-unknown-linux-gnu/release/{libncclshim.so,libnccl_profiler_ncclshim.so}
# The floor is checked by scripts/check-glibc-floor.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-zigbuild >/dev/null || ! python3 -m ziglang version >/dev/null 2>&1; then
    python3 -m pip install --quiet ziglang cargo-zigbuild
fi
cargo zigbuild --release -p ncclshim-shim -p ncclshim-profiler --target x86_64-unknown-linux-gnu.2.17
