#!/usr/bin/env bash
# Times `ncclshim report` over generated jobs of realistic format-2 dumps (BENCHMARKS.md, "CLI at
# scale"): for each rank count, `scale_job` writes one shim and one profiler dump per rank, then
# the report runs under /usr/bin/time -v (wall time, CPU time, peak RSS). The job directories
# are large (about 1.15 MB per rank with the default sizes below): pass a directory on a disk
# with room, and the sizes to use.
#   scripts/bench-report-scale.sh DIR [RANKS...]      (default: 1024 16384)
#   COLLS=3000 SHIM_SLOTS=2048 PROF_SLOTS=2048 NCCLSHIM=target/release/ncclshim
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench-report-scale.sh DIR [RANKS...]}"
shift
ranks=("$@")
[[ ${#ranks[@]} -gt 0 ]] || ranks=(1024 16384)
cd "$root"
cargo build --release -q -p collector-cli --bin ncclshim -p ncclshim-fixtures --example scale_job
bin="${NCCLSHIM:-target/release/ncclshim}"
for n in "${ranks[@]}"; do
    job="$out/job-$n"
    rm -rf "$job"
    target/release/examples/scale_job "$job" "$n" "${COLLS:-3000}" "${SHIM_SLOTS:-2048}" "${PROF_SLOTS:-2048}"
    find "$job" -type f -exec cat {} + > /dev/null # into the page cache, as after a gather
    /usr/bin/time -v "$bin" report "$job" --json > "$out/report-$n.json" 2> "$out/time-$n.txt" || true
    grep -E "Elapsed|User time|System time|Maximum resident" "$out/time-$n.txt" | sed "s/^/$n ranks: /"
done
