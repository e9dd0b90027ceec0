"""Where the `ncclshim` executable of this installation is, and handing over to it.

pip installs the executable into the scheme's scripts directory (`<venv>/bin`, `~/.local/bin`,
`/usr/local/bin`, ...) and this package into site-packages; which pair belongs together is written in
the package's installed-files list (RECORD), so that list is asked first. The scripts directories of
the running interpreter and PATH come after it, for installations without a usable list.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Iterator, List, Optional

_EXE = "ncclshim"
#: Tells the executable where this package's libraries are (it also finds them on its own, relative
#: to itself; this makes `python -m ncclshim run` use exactly the libraries of the imported package).
LIB_DIR_VARIABLE = "NCCLSHIM_LIB_DIR"


def _from_record() -> Iterator[Path]:
    try:
        from importlib.metadata import PackageNotFoundError, files
    except ImportError:  # Python < 3.8 is not supported; keep the other ways working anyway
        return
    try:
        listed = files("ncclshim") or []
    except PackageNotFoundError:
        return
    for f in listed:
        if f.name == _EXE and len(f.parts) >= 2 and f.parts[-2] == "bin":
            yield Path(str(f.locate()))


def _from_schemes() -> Iterator[Path]:
    schemes: List[Optional[str]] = [None]
    if hasattr(sysconfig, "get_preferred_scheme"):  # Python >= 3.10
        schemes.append(sysconfig.get_preferred_scheme("user"))
    else:
        schemes.append("posix_user")
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if scripts:
            yield Path(scripts) / _EXE
    # `pip install --target DIR` puts the scripts in DIR/bin, beside the package.
    yield Path(__file__).resolve().parent.parent / "bin" / _EXE


def find_cli() -> str:
    """The executable, or FileNotFoundError saying where it was looked for."""
    looked: List[str] = []
    for candidate in list(_from_record()) + list(_from_schemes()):
        looked.append(str(candidate))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.resolve())
    on_path = shutil.which(_EXE)
    if on_path:
        return on_path
    raise FileNotFoundError(
        f"ncclshim: the ncclshim executable was not found (looked in {', '.join(looked)} and PATH); "
        "reinstall the package: pip install --force-reinstall ncclshim"
    )


def exec_cli(args: List[str]) -> int:
    """Replaces this process with the executable (signals and the exit status are then its own)."""
    try:
        exe = find_cli()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 127
    from . import lib_dir

    if Path(lib_dir()).is_dir():
        os.environ[LIB_DIR_VARIABLE] = lib_dir()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe, *args])
    return 0  # not reached
