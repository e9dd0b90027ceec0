"""ncclshim: a flight recorder for NCCL failures.

Records, inside every rank of a distributed job and with no code change, what is needed to say which
rank failed first, in which call, why, and what to change; `ncclshim report DIR` turns the dumps of a
whole job into one report.

This package carries the `ncclshim` command (on PATH after `pip install ncclshim`; also
`python -m ncclshim ...`) and the two recorder libraries, and tells a launcher where they are:

    import os, subprocess, ncclshim
    env = {**os.environ, **ncclshim.environ(dir="/shared/dumps")}
    subprocess.run(["torchrun", "--nproc-per-node", "8", "train.py"], env=env)

`ncclshim run -- CMD ...` does the same from a shell and prints the report when the job fails.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Dict, Mapping, Optional, Union


def _version() -> str:
    try:
        from importlib.metadata import version  # Python >= 3.8

        return version("ncclshim")
    except Exception:  # not installed (e.g. imported from a source checkout)
        return "0+unknown"


#: The package's version: the Rust workspace's, which maturin writes into the wheel's metadata.
__version__ = _version()

__all__ = [
    "__version__",
    "cli_path",
    "environ",
    "lib_dir",
    "plugin_path",
    "shim_path",
]

#: The LD_PRELOAD recorder (crate ncclshim-shim).
SHIM_NAME = "libncclshim.so"
#: The NCCL profiler plugin under the name NCCL derives from NCCL_PROFILER_PLUGIN=ncclshim; the
#: package also carries it as libnccl_profiler_ncclshim.so, the name cargo gives it.
PLUGIN_NAME = "libnccl-profiler-ncclshim.so"

_PathLike = Union[str, "os.PathLike[str]"]


def lib_dir() -> str:
    """The directory holding this package's libncclshim.so and profiler plugin."""
    return str(Path(__file__).resolve().parent / "lib")


def _library(name: str) -> str:
    path = Path(lib_dir()) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"ncclshim: {path} is missing; this installation of the ncclshim package is "
            "incomplete (reinstall it: pip install --force-reinstall ncclshim)"
        )
    return str(path)


def shim_path() -> str:
    """Absolute path of libncclshim.so, the recorder to put in LD_PRELOAD."""
    return _library(SHIM_NAME)


def plugin_path() -> str:
    """Absolute path of the NCCL profiler plugin, the value for NCCL_PROFILER_PLUGIN."""
    return _library(PLUGIN_NAME)


def cli_path() -> str:
    """Absolute path of the `ncclshim` executable installed with this package."""
    from ._locate import find_cli

    return find_cli()


def _timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime())


def environ(
    dir: Optional[_PathLike] = None,  # noqa: A002 - the name the CLI's --dir has
    *,
    plugin: bool = True,
    base: Optional[Mapping[str, str]] = None,
) -> Dict[str, str]:
    """The variables to add to a launcher's environment so that every process it starts records.

    Returns a new dict with
      - ``LD_PRELOAD``: libncclshim.so, followed by what ``base`` already preloads (kept as it is
        when it already names the shim);
      - ``NCCL_PROFILER_PLUGIN``: the profiler plugin, unless ``plugin`` is false or ``base``
        already selects a profiler (NCCL loads only one);
      - ``NCCLSHIM_DIR``: the dump directory, absolute (ranks may ``chdir``).

    The directory is chosen as ``ncclshim run`` chooses it: ``dir`` as given; otherwise a fresh
    ``<YYYYmmdd-HHMMSS>-<pid>`` directory under ``$NCCLSHIM_DIR`` (of ``base``) when that is set,
    else under ``./ncclshim-dumps``, so that a report never mixes runs. The shim creates it.
    ``base`` is the environment the launcher starts from; it defaults to ``os.environ``.
    """
    current = os.environ if base is None else base
    shim = shim_path()
    env: Dict[str, str] = {}

    # Ours goes first so it sees NCCL before anything else the user preloads wraps it.
    previous = current.get("LD_PRELOAD", "")
    if not previous:
        env["LD_PRELOAD"] = shim
    elif SHIM_NAME in previous:
        env["LD_PRELOAD"] = previous
    else:
        env["LD_PRELOAD"] = f"{shim} {previous}"

    if plugin and "NCCL_PROFILER_PLUGIN" not in current:
        env["NCCL_PROFILER_PLUGIN"] = plugin_path()

    if dir is not None:
        chosen = Path(os.fspath(dir))
    else:
        parent = current.get("NCCLSHIM_DIR") or "ncclshim-dumps"
        chosen = Path(parent) / f"{_timestamp()}-{os.getpid()}"
    env["NCCLSHIM_DIR"] = str(chosen if chosen.is_absolute() else Path.cwd() / chosen)
    return env


def main(argv: Optional[list] = None) -> int:
    """`python -m ncclshim ARGS...`: the `ncclshim` command with the same arguments."""
    from ._locate import exec_cli

    return exec_cli(sys.argv[1:] if argv is None else argv)
