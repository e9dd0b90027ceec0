#!/usr/bin/env bash
# Builds the release libncclshim.so against glibc 2.17 (so it preloads on every distribution
# training clusters run) with cargo-zigbuild, then checks the floor.
# Output: target/x86_64-unknown-linux-gnu/release/libncclshim.so
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-zigbuild >/dev/null || ! python3 -m ziglang version >/dev/null 2>&1; then
    python3 -m pip install --quiet ziglang cargo-zigbuild
fi
cargo zigbuild --release -p ncclshim-shim --target x86_64-unknown-linux-gnu.2.17
scripts/check-glibc-floor.sh target/x86_64-unknown-linux-gnu/release/libncclshim.so 2.17
