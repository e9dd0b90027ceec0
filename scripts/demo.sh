#!/usr/bin/env bash
# The main job on a built-in example: a real NCCL failure, captured under libncclshim.so on this
# machine and explained by the report `ncclshim run` prints when the job fails.
#
# The job: `tests/c/nccl_fail.c`, linked against the real libnccl.so.2 of the PyPI wheel
# nvidia-nccl-cu12, run by `ncclshim run` (which preloads the shim, selects the profiler plugin and
# sets the dump directory) with a typo in NCCL_SOCKET_IFNAME, so NCCL's bootstrap finds no interface.
# Without a libnccl (offline machine), the bundled real dumps in tests/fixtures/real are reported.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cli="$root/target/release/ncclshim"
if [[ ! -x "$cli" || ! -f "$root/target/release/libncclshim.so" ]]; then
    cargo build --release --workspace --quiet || exit 2
fi
nccl="$root/.cache/nccl/cu12/lib"
if [[ ! -f "$nccl/libnccl.so.2" ]]; then
    bash scripts/fetch-nccl.sh >/dev/null 2>&1 || true
fi
if [[ ! -f "$nccl/libnccl.so.2" ]] || ! command -v cc >/dev/null; then
    echo "demo: no libnccl.so.2 or C compiler here; reporting the bundled real capture instead" >&2
    exec "$cli" report "$root/tests/fixtures/real/socket-ifname-cu12"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -o "$work/nccl_fail" tests/c/nccl_fail.c -Itests/c -L"$nccl" -l:libnccl.so.2 -Wl,-rpath,"$nccl" || exit 2

echo "demo: running a job whose NCCL_SOCKET_IFNAME has a typo (eht0), under ncclshim run" >&2
echo "\$ NCCL_SOCKET_IFNAME=eht0 ncclshim run --dir $work/dumps -- nccl_fail uniqueid" >&2
# `run` prints the report itself when the job fails (or is stopped), and exits with the job's
# status: 1 here, the failure the demo makes.
NCCL_SOCKET_IFNAME=eht0 "$cli" run --dir "$work/dumps" -- "$work/nccl_fail" uniqueid
status=$?
echo "demo: ncclshim run exited $status, the job's own status" >&2
[[ $status -eq 1 ]] && exit 0
exit "$status"
