#!/usr/bin/env bash
# Benchmark of issue 37 (BENCHMARKS.md "Summaries"): per-node summaries against today's direct
# report, on the generated scale job (`scale_node`: the `scale_job` of BENCHMARKS.md "CLI at
# scale", written node by node, 8 ranks a node).
#   scripts/bench-summaries.sh direct DIR RANKS   one job of RANKS ranks, one folder per node;
#       `report` on all its dumps, then `summarize` per node (one after the other, each timed)
#       and `report` on the summaries, each under /usr/bin/time -v; the two reports compared.
#   scripts/bench-summaries.sh stream DIR RANKS   a job larger than the disk: each node written,
#       summarized and its dumps deleted before the next (the victim's node first, as the whole
#       job writes it), keeping only the summaries; then `report` on them. Stops early when
#       STOP_AT (Unix seconds) has passed: the report is then on the nodes made so far.
#       NODES=FROM-TO makes only those nodes (several generators in parallel on disjoint
#       ranges, each into its own DIR with REPORT=0; then `report` on all their summaries).
# Sizes: COLLS (3000) SHIM_SLOTS (2048) PROF_SLOTS (2048), as scripts/bench-report-scale.sh;
# about 1.15 MB of dumps a rank at those sizes. NCCLSHIM=target/release/ncclshim,
# SCALE_NODE=target/release/examples/scale_node (copies of them keep a long run on one build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:?usage: bench-summaries.sh direct|stream DIR RANKS}"
out="${2:?usage: bench-summaries.sh direct|stream DIR RANKS}"
ranks="${3:?usage: bench-summaries.sh direct|stream DIR RANKS}"
sizes=("${COLLS:-3000}" "${SHIM_SLOTS:-2048}" "${PROF_SLOTS:-2048}")
per_node=8
nodes=$((ranks / per_node))
victim_node=$((ranks / 2 / per_node))
cd "$root"
bin="${NCCLSHIM:-target/release/ncclshim}"
gen="${SCALE_NODE:-target/release/examples/scale_node}"
if [[ -z ${NCCLSHIM:-} || -z ${SCALE_NODE:-} ]]; then
    cargo build --release -q -p collector-cli --bin ncclshim -p ncclshim-fixtures --example scale_node
fi
mkdir -p "$out"

# The nodes in the order a whole job writes them: the victim's first (of NODES=FROM-TO only,
# when given).
node_order() {
    local from=0 to=$((nodes - 1))
    if [[ -n ${NODES:-} ]]; then
        from=${NODES%-*} to=${NODES#*-}
    fi
    if ((victim_node >= from && victim_node <= to)); then
        echo "$victim_node"
    fi
    seq "$from" "$to" | grep -vx "$victim_node"
}

# `/usr/bin/time -v` of a command writing its stdout to a file, the lines of interest printed
# with a label.
timed() {
    local label=$1 into=$2
    shift 2
    /usr/bin/time -v "$@" >"$into" 2>"$out/time.txt" || true
    grep -E "Elapsed|User time|System time|Maximum resident" "$out/time.txt" | sed "s/^\s*/$label: /"
}

# Findings the same: the two report JSONs apart from the tool's version.
same_reports() {
    if diff <(grep -v tool_version "$1") <(grep -v tool_version "$2") >/dev/null; then
        echo "reports: the same"
    else
        echo "reports: DIFFER ($1, $2)"
    fi
}

case "$mode" in
direct)
    job="$out/job-$ranks"
    sums="$out/summaries-$ranks"
    rm -rf "$sums"
    mkdir -p "$sums"
    # REUSE_JOB=1: the job written by an earlier run is read again, not written anew.
    if [[ ${REUSE_JOB:-} != 1 ]]; then
        rm -rf "$job"
        t0=$(date +%s)
        for k in $(node_order); do
            "$gen" "$job/node-$k" "$ranks" $((k * per_node)) "$per_node" "${sizes[@]}"
        done
        echo "$ranks ranks written in $(($(date +%s) - t0)) s: $(du -sh "$job" | cut -f1)"
    fi
    find "$job" -type f -exec cat {} + >/dev/null # into the page cache, as after a gather
    timed "direct report" "$out/report-direct.json" "$bin" report "$job" --json
    # One summarize per node, each timed: on a cluster they run at once, one per node; here
    # SUMMARIZE_JOBS (1) at a time.
    : >"$out/summarize-times.txt"
    t0=$(date +%s.%N)
    seq 0 $((nodes - 1)) | xargs -P "${SUMMARIZE_JOBS:-1}" -I{} \
        /usr/bin/time -f "%e %M" -a -o "$out/summarize-times.txt" \
        "$bin" summarize "$job/node-{}" -o "$sums/node-{}.ncclshim-summary" 2>/dev/null
    echo "summarize, $nodes nodes, ${SUMMARIZE_JOBS:-1} at a time: $(echo "$(date +%s.%N) - $t0" | bc) s"
    sort -n "$out/summarize-times.txt" | awk '{t[NR]=$1; m=($2>m?$2:m)} END {printf "summarize per node: median %s s, max %s s, peak RSS %d KB\n", t[int((NR+1)/2)], t[NR], m}'
    echo "summaries: $(du -sb "$sums" | cut -f1) bytes, $(($(du -sb "$sums" | cut -f1) / ranks)) bytes per rank"
    timed "report on summaries" "$out/report-summaries.json" "$bin" report "$sums" --json
    same_reports "$out/report-direct.json" "$out/report-summaries.json"
    # ALSO_KEEP=N: the report on the summaries again keeping N operations a part, as a job of
    # 32,768 x 256 / N parts would (100,000 ranks: 41), and whether its findings are the same.
    if [[ -n ${ALSO_KEEP:-} ]]; then
        NCCLSHIM_KEEP_OPERATIONS=$ALSO_KEEP timed "report on summaries, keeping $ALSO_KEEP" \
            "$out/report-keep-$ALSO_KEEP.json" "$bin" report "$sums" --json
        same_reports "$out/report-direct.json" "$out/report-keep-$ALSO_KEEP.json"
    fi
    ;;
stream)
    node="$out/node"
    sums="$out/stream-summaries-$ranks"
    nodes_wanted=$(node_order | wc -l)
    rm -rf "$node" "$sums"
    mkdir -p "$sums"
    : >"$out/stream-times.txt"
    made=0
    t0=$(date +%s)
    for k in $(node_order); do
        if [[ -n ${STOP_AT:-} && $(date +%s) -ge $STOP_AT ]]; then
            echo "stopped at STOP_AT after $made of $nodes_wanted nodes"
            break
        fi
        rm -rf "$node"
        "$gen" "$node" "$ranks" $((k * per_node)) "$per_node" "${sizes[@]}"
        /usr/bin/time -f "%e %M" -a -o "$out/stream-times.txt" \
            "$bin" summarize "$node" -o "$sums/node-$k.ncclshim-summary" 2>/dev/null
        made=$((made + 1))
        if ((made % 500 == 0)); then
            echo "$made nodes in $(($(date +%s) - t0)) s, summaries $(du -sh "$sums" | cut -f1)"
        fi
    done
    rm -rf "$node"
    echo "$made nodes ($((made * per_node)) ranks) made and summarized in $(($(date +%s) - t0)) s"
    sort -n "$out/stream-times.txt" | awk '{t[NR]=$1; m=($2>m?$2:m)} END {printf "summarize per node: median %s s, max %s s, peak RSS %d KB\n", t[int((NR+1)/2)], t[NR], m}'
    bytes=$(du -sb "$sums" | cut -f1)
    echo "summaries: $bytes bytes, $((bytes / (made * per_node))) bytes per rank"
    if [[ ${REPORT:-1} != 0 ]]; then
        timed "report on $made summaries" "$out/report-stream.json" "$bin" report "$sums" --json
    fi
    ;;
*)
    echo "usage: bench-summaries.sh direct|stream DIR RANKS" >&2
    exit 2
    ;;
esac
