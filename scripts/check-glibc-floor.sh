#!/usr/bin/env bash
# Prints the highest GLIBC symbol version a shared object needs and fails when it is above the
# allowed floor. ld.so refuses to preload a library that needs a newer glibc than the host has
# ("cannot be preloaded ... ignored"), and the recorder then silently records nothing.
#
#   scripts/check-glibc-floor.sh LIB [MAX]   check one library (MAX defaults to 2.17)
#   scripts/check-glibc-floor.sh --wheel WHL [MAX]
#                                            check every ELF file in a wheel (the pip package of
#                                            scripts/build-wheel.sh: the executable and the libraries)
#   scripts/check-glibc-floor.sh             build the release cdylibs (libncclshim.so and the
#                                            profiler plugin) against glibc 2.17 with cargo-zigbuild
#                                            (scripts/build-shim-release.sh) and check both
set -euo pipefail
cd "$(dirname "$0")/.."

check() { # lib max
    local lib="$1" max="$2" need
    [[ -f "$lib" ]] || { echo "no such file: $lib" >&2; return 2; }
    need="$(objdump -T "$lib" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)"
    need="${need:-none}"
    echo "$lib needs GLIBC $need (allowed: <= $max)"
    if [[ "$need" != none && "$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -n1)" != "$max" ]]; then
        echo "symbols above GLIBC_$max:" >&2
        objdump -T "$lib" | grep 'GLIBC_' | while read -r line; do
            v="$(grep -o 'GLIBC_[0-9][0-9.]*' <<<"$line" | sed 's/GLIBC_//')"
            [[ "$(printf '%s\n%s\n' "$v" "$max" | sort -V | tail -n1)" == "$max" ]] || echo "  $line" >&2
        done
        return 1
    fi
}

if [[ "${1:-}" == "--wheel" ]]; then
    [[ -f "${2:-}" ]] || { echo "usage: $0 --wheel WHEEL [MAX]; no such wheel: ${2:-}" >&2; exit 2; }
    unpacked="$(mktemp -d)"
    trap 'rm -rf "$unpacked"' EXIT
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$2" "$unpacked"
    cd "$unpacked"
    status=0 elves=0
    while IFS= read -r -d '' f; do
        [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
        elves=$((elves + 1))
        check "${f#./}" "${3:-2.17}" || status=1
    done < <(find . -type f -print0 | sort -z)
    [[ $elves -gt 0 ]] || { echo "no ELF file in $2" >&2; exit 1; }
    echo "$elves ELF files in $(basename "$2")"
    exit $status
fi
if [[ $# -ge 1 ]]; then
    check "$1" "${2:-2.17}"
    exit
fi
bash scripts/build-shim-release.sh >/dev/null
status=0
for lib in target/x86_64-unknown-linux-gnu/release/libncclshim.so \
           target/x86_64-unknown-linux-gnu/release/libnccl_profiler_ncclshim.so; do
    check "$lib" 2.17 || status=1
done
exit $status
