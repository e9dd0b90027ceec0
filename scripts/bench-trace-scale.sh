#!/usr/bin/env bash
# Peak memory and time of `ncclshim trace` over a generated job (BENCHMARKS.md, "trace at
# scale"): `scale_job` writes RANKS shim dumps of one thread ring of SLOTS slots holding COLLS
# all-reduces (no profiler dumps), then `ncclshim trace` runs under /usr/bin/time -v.
#   scripts/bench-trace-scale.sh DIR RANKS SLOTS COLLS [NCCLSHIM...]
# 16 M records: scripts/bench-trace-scale.sh target/bench 16 1048576 1048576
# Each extra NCCLSHIM binary (an older build, say) is timed on the same job right after.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench-trace-scale.sh DIR RANKS SLOTS COLLS [NCCLSHIM...]}"
ranks="${2:?ranks}" slots="${3:?slots}" colls="${4:?colls}"
shift 4
bins=("$root/target/release/ncclshim" "$@")
cd "$root"
cargo build --release -q -p collector-cli --bin ncclshim -p ncclshim-fixtures --example scale_job
job="$out/trace-job-$ranks-$slots-$colls"
if [[ ! -d "$job" ]]; then
    target/release/examples/scale_job "$job" "$ranks" "$colls" "$slots" 0
fi
records=$(target/release/ncclshim dump "$(ls "$job"/*.ncclshim | head -1)" | tail -1)
echo "job: $job ($(du -sh "$job" | cut -f1)); first dump's $records"
find "$job" -type f -exec cat {} + > /dev/null # into the page cache, as after a gather
for bin in "${bins[@]}"; do
    /usr/bin/time -v "$bin" trace "$job" -o "$out/trace-$ranks.json" 2> "$out/time-trace.txt" || true
    echo "$bin: $(grep -E "Elapsed|User time|System time|Maximum resident" "$out/time-trace.txt" | sed 's/^\s*//' | tr '\n' ';')"
    echo "  trace: $(du -h "$out/trace-$ranks.json" | cut -f1)"
done
