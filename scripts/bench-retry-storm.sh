#!/usr/bin/env bash
# Benchmark of issue 36 item 8 (BENCHMARKS.md "A retry storm"): RANKS real processes, each with
# the release shim preloaded, retry a failing ncclGetUniqueId RETRIES times on the real PyPI
# libnccl (a bad NCCL_SOCKET_IFNAME: no GPU needed); then `report --json` over their dumps is
# timed with each ncclshim binary given (a baseline build first, then this one), and the
# reports compared byte for byte apart from the tool version.
#   scripts/bench-retry-storm.sh OUT RANKS RETRIES NCCLSHIM_BIN [NCCLSHIM_BIN...]
# Needs scripts/setup.sh (the release shim and .cache/nccl). ~0.8 MB of dumps per rank.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out=$1 ranks=$2 retries=$3
shift 3
lib="$root/.cache/nccl/cu12/lib"
mkdir -p "$out"
cc -O1 -o "$out/nccl_fail" "$root/tests/c/nccl_fail.c" -I"$root/tests/c" -L"$lib" -l:libnccl.so.2 -Wl,-rpath,"$lib"
job="$out/job-$ranks"
if [[ ! -d $job ]]; then
    for _ in $(seq "$ranks"); do
        NCCL_SOCKET_IFNAME=bad0 LD_PRELOAD="$root/target/release/libncclshim.so" NCCLSHIM_DIR="$job" \
            "$out/nccl_fail" "retry $retries" >/dev/null 2>&1 || true
    done
fi
echo "$(ls "$job" | wc -l) dumps, $(du -sh "$job" | cut -f1) in $job; load $(cut -d' ' -f1 /proc/loadavg)"
i=0
for bin in "$@"; do
    i=$((i + 1))
    /usr/bin/time -f "$bin: %e s wall, %U s user + %S s sys, %M KB peak" \
        "$bin" report "$job" --json 2>&1 >"$out/report-$i.json" | tail -1 || true
done
for j in $(seq 2 "$i"); do
    if diff <(grep -v tool_version "$out/report-1.json") <(grep -v tool_version "$out/report-$j.json") >/dev/null; then
        echo "report $j: the same as report 1"
    else
        echo "report $j: DIFFERS from report 1"
    fi
done
