#!/usr/bin/env bash
# One-time setup on a fresh machine: caches the real libnccl.so.2 from the PyPI wheels (what the tests
# and the demo run against) and builds the release artifacts (libncclshim.so, the profiler plugin under
# both of its names, the ncclshim CLI). Idempotent; safe to run again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cc >/dev/null || { echo "setup: a C compiler (cc) is needed for the tests' C drivers" >&2; exit 1; }
command -v python3 >/dev/null || { echo "setup: python3 with pip is needed to fetch the NCCL wheels" >&2; exit 1; }
# The scenario lab (tests/lab) simulates hosts with namespaces: unshare/nsenter (util-linux), ip (iproute2).
if [[ $(id -u) == 0 ]] && ! { command -v unshare && command -v nsenter && command -v ip; } >/dev/null; then
    apt-get install -y -qq util-linux iproute2 >/dev/null || echo "setup: could not install util-linux/iproute2; the scenario lab will be skipped" >&2
fi
bash scripts/fetch-nccl.sh
cargo build --release --workspace --quiet
if [[ -f scripts/install-plugin.sh ]]; then
    bash scripts/install-plugin.sh --release >/dev/null
fi
echo "setup: release artifacts in $root/target/release"
