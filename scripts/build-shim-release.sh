#!/usr/bin/env bash
# Builds the release cdylibs (libncclshim.so and the profiler plugin) against glibc 2.17, so they
# load on every distribution training clusters run, with cargo-zigbuild and zig (PyPI's `ziglang`),
# both pinned in scripts/tools-requirements.txt and run from the project's own virtual environment
# (scripts/tools-venv.sh), never installed into the system's or the user's Python.
# Output: target/x86_64-unknown-linux-gnu/release/{libncclshim.so,libnccl_profiler_ncclshim.so}
# The floor is checked by scripts/check-glibc-floor.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(bash scripts/tools-venv.sh --tools | tail -n1)"
# shellcheck source=scripts/zig-env.sh
source scripts/zig-env.sh "$venv"
echo "build-shim-release: cargo zigbuild (glibc 2.17) of libncclshim.so and the profiler plugin" >&2
"$venv/bin/cargo-zigbuild" zigbuild --release -p ncclshim-shim -p ncclshim-profiler \
    --target x86_64-unknown-linux-gnu.2.17
