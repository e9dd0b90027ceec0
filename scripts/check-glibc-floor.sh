#!/usr/bin/env bash
# Prints the highest GLIBC symbol version a shared object needs and fails when it is above the
# allowed floor. ld.so refuses to preload a library that needs a newer glibc than the host has
# ("cannot be preloaded ... ignored"), and the shim then silently records nothing.
# usage: scripts/check-glibc-floor.sh [LIB] [MAX]   (defaults: target/release/libncclshim.so, 2.17)
set -euo pipefail
lib="${1:-target/release/libncclshim.so}"
max="${2:-2.17}"
[[ -f "$lib" ]] || { echo "no such file: $lib" >&2; exit 2; }
need="$(objdump -T "$lib" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)"
need="${need:-none}"
echo "$lib needs GLIBC $need (allowed: <= $max)"
if [[ "$need" != none && "$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -n1)" != "$max" ]]; then
    echo "symbols above GLIBC_$max:" >&2
    objdump -T "$lib" | awk -v m="$max" '/GLIBC_/ {print}' | grep -v "GLIBC_\(2\.2\.5\|2\.3\|2\.3\.[0-9]\|2\.[4-9]\|2\.1[0-7]\)[ )]" >&2 || true
    exit 1
fi
