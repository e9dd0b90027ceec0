#!/usr/bin/env bash
# CPU and wall time of one `ncclshim exporter` scrape over the benchmark job's dumps
# (BENCHMARKS.md, "exporter: one scrape"):
#   scripts/bench-exporter.sh DIR [RANKS] [COLLS]
# writes the job into DIR once (fixtures' bench_job example: RANKS shim dumps of COLLS
# collectives each), starts the release exporter on a free port, and prints per scrape the
# exporter's own series: dumps parsed, wall seconds, CPU seconds (every thread). Scrape 1 parses
# every dump; 2-6 find nothing changed (the cache); before each of 7-11 every dump is touched,
# so every one is parsed again (a job whose every rank progresses between two scrapes).
# Build first: cargo build --release -p collector-cli -p ncclshim-fixtures --example bench_job
set -euo pipefail
dir=${1:?usage: bench-exporter.sh DIR [RANKS] [COLLS]}
ranks=${2:-8}
colls=${3:-3000}
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release/ncclshim"
[[ -d "$dir" ]] || "$root/target/release/examples/bench_job" "$dir" "$ranks" "$colls"
err="$(mktemp)"
"$bin" exporter --listen 127.0.0.1:0 "$dir" 2>"$err" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; rm -f "$err"' EXIT
for _ in $(seq 100); do grep -q 'http://' "$err" && break; sleep 0.05; done
port="$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$err")"
scrape() {
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
    local text
    text="$(cat <&3)"
    exec 3<&-
    local parsed wall cpu
    parsed="$(sed -n 's/^ncclshim_exporter_dumps_parsed //p' <<<"$text")"
    wall="$(sed -n 's/^ncclshim_exporter_scrape_duration_seconds //p' <<<"$text")"
    cpu="$(sed -n 's/^ncclshim_exporter_scrape_cpu_seconds //p' <<<"$text")"
    printf 'scrape %2d: %5s dumps parsed, wall %.4f s, cpu %.4f s, %d bytes\n' "$1" "$parsed" "$wall" "$cpu" "${#text}"
}
for i in $(seq 1 6); do scrape "$i"; done
for i in $(seq 7 11); do
    find "$dir" -name '*.ncclshim' -exec touch {} +
    scrape "$i"
done
