# Sourced (`source scripts/zig-env.sh VENV`): points cargo-zigbuild, and maturin --zig, which uses it,
# at the zig of the tools environment VENV (scripts/tools-venv.sh --tools), so that neither a `zig`
# elsewhere on PATH nor the `ziglang` of another Python is picked up instead of the pinned one.
zig_venv="$1"
CARGO_ZIGBUILD_ZIG_PATH="$("$zig_venv/bin/python" -c \
    'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
[[ -x "$CARGO_ZIGBUILD_ZIG_PATH" ]] || { echo "zig-env: no zig at $CARGO_ZIGBUILD_ZIG_PATH" >&2; exit 1; }
export CARGO_ZIGBUILD_ZIG_PATH
# Where cargo-zigbuild falls back to `python -m ziglang`: the same environment's Python.
export CARGO_ZIGBUILD_PYTHON_PATH="$zig_venv/bin/python"
unset zig_venv
