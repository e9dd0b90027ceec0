#!/usr/bin/env bash
# One-time setup on a fresh machine: caches the real libnccl.so.2 from the PyPI wheels (what the tests
# and the demo run against) and builds the release artifacts (libncclshim.so, the profiler plugin under
# both of its names, the ncclshim CLI). Idempotent; safe to run again: a second run downloads nothing
# and builds only what changed. Says what it downloads and builds, and how big, as it goes.
# pip is the project's own virtual environment's (scripts/tools-venv.sh, made on first use), never the
# system's: a distribution's externally managed python3 (PEP 668) is fine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
say() { echo "setup: $*" >&2; }
command -v cc >/dev/null || { say "a C compiler (cc) is needed for the tests' C drivers"; exit 1; }
command -v python3 >/dev/null || { say "python3 is needed (its venv module, or uv/virtualenv) to download the NCCL wheels"; exit 1; }
# The scenario lab (tests/lab) simulates hosts with namespaces: unshare/nsenter (util-linux), ip (iproute2).
if [[ $(id -u) == 0 ]] && ! { command -v unshare && command -v nsenter && command -v ip; } >/dev/null; then
    say "installing util-linux and iproute2 (apt-get) for the scenario lab"
    apt-get install -y -qq util-linux iproute2 >/dev/null || say "could not install util-linux/iproute2; the scenario lab will be skipped"
fi

say "[1/3] the real libnccl.so.2 of the PyPI wheels nvidia-nccl-cu12/cu11 in .cache/nccl and nccl4py in target/tools-venv (first run: ~520 MB download, under a minute on a fast link)"
bash scripts/fetch-nccl.sh
# nccl4py (NVIDIA's Python binding, pinned with hashes), which a test runs under the shim.
bash scripts/tools-venv.sh --test >/dev/null

if [[ -x target/release/ncclshim ]]; then
    say "[2/3] cargo build --release --workspace (up to date: only what changed is rebuilt)"
else
    say "[2/3] cargo build --release --workspace (first run: ~200 crates, 5 to 13 minutes on 2 cores, the last minutes in ncclshim-diagnose and collector-cli)"
fi
# cargo's own "Compiling ..." lines are the progress.
cargo build --release --workspace

say "[3/3] the profiler plugin under NCCL's name, libnccl-profiler-ncclshim.so"
# --no-build: the workspace build above made it; building the plugin crate alone would resolve its
# dependencies' features differently and build it again on every run.
bash scripts/install-plugin.sh --release --no-build >/dev/null
say "release artifacts in $root/target/release"
