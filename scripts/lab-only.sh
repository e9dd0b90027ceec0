#!/usr/bin/env bash
# Runs some of the scenario lab's scenarios (as root; after `bash scripts/setup.sh`) and keeps
# what each one produced: OUT/<scenario>/report.json (`ncclshim report --json`), report.exit (its
# exit status), dumps/, the rank scripts and outputs. Prints each report's first finding.
#
#   bash scripts/lab-only.sh 'ho-*'                 # the multi-host cases, into target/lab-out
#   bash scripts/lab-only.sh c20-dead-peer,c27-nranks /tmp/out
#
# PATTERN is LAB_ONLY's: names separated by commas, a trailing `*` a prefix. The lab test
# itself passes or fails as usual (a pending scenario is skipped; its misses are printed).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
pattern="${1:?usage: lab-only.sh PATTERN [OUT]}"
out="${2:-$root/target/lab-out}"
LAB_ONLY="$pattern" LAB_KEEP=1 cargo test -p ncclshim-integration-tests --test lab scenario_lab \
    -- --nocapture 2>&1 | grep -E "^scenario lab:|^test result|^[a-z0-9-]+: |^    ([A-Z]+-[0-9]+:|kept:|expected)" | cut -c1-400
status=${PIPESTATUS[0]}
mkdir -p "$out"
IFS=',' read -ra parts <<<"$pattern"
for d in "$root"/target/lab/*/; do
    name="$(basename "$d")"
    [[ -f "$d/report.json" ]] || continue
    hit=0
    for p in "${parts[@]}"; do
        # shellcheck disable=SC2053 # PATTERN is a glob on purpose
        [[ "$name" == $p ]] && hit=1
    done
    ((hit)) || continue
    rm -rf "${out:?}/$name"
    cp -a "$d" "$out/$name"
    python3 - "$out/$name/report.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fs = r.get("findings", [])
p = next((f for f in fs if f.get("severity") == "primary"), fs[0] if fs else None)
print(f"{sys.argv[2]}: " + (f"{p['severity']} {p['id']}: {p['title']}" if p else "no findings"))
PY
done
echo "kept in $out/<scenario>/ (report.json, report.exit, dumps/)"
exit "$status"
