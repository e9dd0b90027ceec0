#!/usr/bin/env bash
# The main job on a built-in example: a real NCCL failure, captured under libncclshim.so on this
# machine and explained by the report `ncclshim run` prints when the job fails.
#
# The job: `tests/c/nccl_fail.c uniqueidcheck`, linked against the real libnccl.so.2 of the PyPI
# wheel nvidia-nccl-cu12, run by `ncclshim run` (which preloads the shim, selects the profiler
# plugin and sets the dump directory) with a typo in NCCL_SOCKET_IFNAME, so NCCL's bootstrap finds
# no interface. The program checks the call's result as a real one does and exits 1: `run` prints
# the report. Without a libnccl (offline machine, or NCCLSHIM_DEMO_OFFLINE=1), the bundled real
# dumps in tests/fixtures/real are reported instead.
#
# Exits 0 only when the report it printed holds the diagnosis (the primary C08, its evidence naming
# the interface): a demo that no longer shows it fails (.ci/run, collector-cli/tests/demo.rs).
# The dumps stay in target/demo/dumps for `ncclshim report` or `ncclshim trace`.
# For the tests: NCCLSHIM_DEMO_CLI names the ncclshim binary (default target/release/ncclshim,
# built when missing) and NCCLSHIM_DEMO_DIR the folder of the dumps (default target/demo).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cli="${NCCLSHIM_DEMO_CLI:-$root/target/release/ncclshim}"
if [[ -z "${NCCLSHIM_DEMO_CLI:-}" ]] && [[ ! -x "$cli" || ! -f "$root/target/release/libncclshim.so" ]]; then
    cargo build --release --workspace --quiet || exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Whether the report in $1 shows the diagnosis of a NCCL_SOCKET_IFNAME set to $2 that matches no
# interface; says what is missing when not.
diagnosed() {
    local report="$1" ifname="$2" missing=()
    grep -q '^PRIMARY \[C08\]' "$report" || missing+=("the primary C08")
    grep -q "^    - .*NCCL_SOCKET_IFNAME=$ifname" "$report" || missing+=("evidence naming NCCL_SOCKET_IFNAME=$ifname")
    grep -q '^  remedy: .*NCCL_SOCKET_IFNAME' "$report" || missing+=("its remedy")
    ((${#missing[@]} == 0)) && return 0
    local list
    printf -v list '%s; ' "${missing[@]}"
    echo "demo: FAILED: the report printed lacks ${list%; }" >&2
    return 1
}

nccl="$root/.cache/nccl/cu12/lib"
if [[ -z "${NCCLSHIM_DEMO_OFFLINE:-}" && ! -f "$nccl/libnccl.so.2" ]]; then
    bash scripts/fetch-nccl.sh >/dev/null 2>&1 || true
fi
if [[ -n "${NCCLSHIM_DEMO_OFFLINE:-}" || ! -f "$nccl/libnccl.so.2" ]] || ! command -v cc >/dev/null; then
    if [[ -n "${NCCLSHIM_DEMO_OFFLINE:-}" ]]; then
        echo "demo: NCCLSHIM_DEMO_OFFLINE is set; reporting the bundled real capture" >&2
    else
        echo "demo: no libnccl.so.2 or C compiler here; reporting the bundled real capture instead" >&2
    fi
    echo "\$ ncclshim report tests/fixtures/real/socket-ifname-cu12" >&2
    "$cli" report "$root/tests/fixtures/real/socket-ifname-cu12" | tee "$work/report.txt"
    status=${PIPESTATUS[0]}
    # `report` exits 1 when it found and explained a failure.
    [[ $status -eq 1 ]] || echo "demo: ncclshim report exited $status, not 1 (a failure found)" >&2
    diagnosed "$work/report.txt" nonexistent0 && [[ $status -eq 1 ]] || exit 1
    exit 0
fi
cc -o "$work/nccl_fail" tests/c/nccl_fail.c -Itests/c -L"$nccl" -l:libnccl.so.2 -Wl,-rpath,"$nccl" || exit 2

out="${NCCLSHIM_DEMO_DIR:-$root/target/demo}"
dumps="$out/dumps"
# `--dir` is shared by every run that names it: the previous demo's dumps go first.
rm -rf "$dumps"
mkdir -p "$out" || exit 2
echo "demo: running a job whose NCCL_SOCKET_IFNAME has a typo (eht0), under ncclshim run" >&2
echo "\$ NCCL_SOCKET_IFNAME=eht0 ncclshim run --dir $dumps -- nccl_fail uniqueidcheck" >&2
# `run` prints the report itself when the job fails, and exits with the job's status: 1 here,
# the failure the program reports after NCCL's error.
NCCL_SOCKET_IFNAME=eht0 "$cli" run --dir "$dumps" -- "$work/nccl_fail" uniqueidcheck | tee "$work/report.txt"
status=${PIPESTATUS[0]}
echo "demo: ncclshim run exited $status, the job's own status" >&2
diagnosed "$work/report.txt" eht0 || exit 1
[[ $status -eq 1 ]] || { echo "demo: FAILED: the job was to fail with status 1" >&2; exit 1; }
echo "demo: the dumps stay in $dumps (ncclshim report or ncclshim trace on them)" >&2
exit 0
