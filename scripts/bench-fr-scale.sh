#!/usr/bin/env bash
# Times what PyTorch Flight Recorder dumps add to `ncclshim report` at scale (BENCHMARKS.md,
# "Reading PyTorch Flight Recorder dumps", "Fourth pass"): `scale_job` writes an
# N-rank shim job (rank N/2 dies inside an all-reduce, the others see the connection reset and
# exit), then N Flight Recorder dumps are made as hardlinks (no disk cost) of two synthetic
# 2,000-entry dumps whose default group holds the N ranks: the job's last all-reduces, all
# completed, and for rank N/2 the last one never completed; named `rank_<i>` in a folder outside
# the job. Each binary is timed on the job without, then with, the dumps (`--flight-recorder`),
# binaries alternated, ROUNDS rounds; then everything generated is deleted.
#   scripts/bench-fr-scale.sh DIR RANKS COLLS SHIM_SLOTS PROF_SLOTS BIN...
#   ROUNDS=2 (default)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench-fr-scale.sh DIR RANKS COLLS SHIM_SLOTS PROF_SLOTS BIN...}"
n="$2" colls="$3" shim_slots="$4" prof_slots="$5"
shift 5
bins=("$@")
cd "$root"
job="$out/job-$n"
fr="$out/fr-$n"
rm -rf "$job" "$fr"
mkdir -p "$fr"
target/release/examples/scale_job "$job" "$n" "$colls" "$shim_slots" "$prof_slots"
du -sh "$job"
# The Flight Recorder side of that job: 2,000 entries (the default buffer) of the last
# all-reduces, completed on every rank but the victim, whose last one never completes.
python3 tests/fixtures/flight-recorder/make.py scale-bench "$colls" "$n" 2000 "$fr/completed.pkl" "$fr/hung.pkl"
for ((i = 0; i < n; i++)); do
    if ((i == n / 2)); then ln "$fr/hung.pkl" "$fr/rank_$i"; else ln "$fr/completed.pkl" "$fr/rank_$i"; fi
done
rm "$fr/completed.pkl" "$fr/hung.pkl"
find "$job" "$fr" -type f -exec cat {} + >/dev/null # into the page cache, as after a gather
timed() { # label, then the command
    local label="$1"
    shift
    /usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KB max RSS" "$@" >"$out/report.json" 2>"$out/time.txt" || true
    echo "$label: $(tail -1 "$out/time.txt"); $(python3 -c "import json,sys; f=json.load(open(sys.argv[1])).get(\"flight_recorder\") or {}; print(\"read\", f.get(\"dumps_read\"), \"listed only\", f.get(\"dumps_listed_only\"))" "$out/report.json")"
}
for ((round = 1; round <= ${ROUNDS:-2}; round++)); do
    for bin in "${bins[@]}"; do
        timed "$n ranks, $bin, no FR dumps" "$bin" report "$job" --json
        timed "$n ranks, $bin, $n FR dumps" "$bin" report "$job" --json --flight-recorder "$fr/rank_"
    done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$job" "$fr" "$out/report.json" "$out/time.txt"
