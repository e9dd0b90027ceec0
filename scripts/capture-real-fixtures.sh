#!/usr/bin/env bash
# Re-captures the real dumps under tests/fixtures/real/: tests/c/nccl_fail.c linked against the
# PyPI NCCL wheels, run under the debug libncclshim.so on this (GPU-less) machine. After running
# it, accept the CLI's golden snapshots of them: `cargo insta test -p collector-cli --accept`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/fetch-nccl.sh >/dev/null
cargo build -q -p ncclshim-shim
shim="$root/target/debug/libncclshim.so"
out="$root/tests/fixtures/real"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

capture() { # scenario wheel mode [VAR=value...]
    local name="$1" wheel="$2" mode="$3"
    shift 3
    local lib="$root/.cache/nccl/$wheel/lib"
    cc -o "$work/nccl_fail_$wheel" tests/c/nccl_fail.c -Itests/c -L"$lib" -l:libnccl.so.2 -Wl,-rpath,"$lib"
    rm -rf "${out:?}/$name" && mkdir -p "$out/$name"
    env -u NCCL_DEBUG "$@" NCCLSHIM_DIR="$out/$name" NCCLSHIM_RINGS=2 NCCLSHIM_RING_SLOTS=64 \
        NCCLSHIM_ARENA_BYTES=64k LD_PRELOAD="$shim" "$work/nccl_fail_$wheel" "$mode" >"$out/$name.stdout" || true
    echo "captured $name: $(ls "$out/$name")"
}

capture socket-ifname-cu12 cu12 uniqueid NCCL_SOCKET_IFNAME=nonexistent0
capture socket-ifname-cu11 cu11 uniqueid NCCL_SOCKET_IFNAME=nonexistent0
capture init-no-gpu-cu11 cu11 init
capture null-comm-cu12 cu12 nullcomm
