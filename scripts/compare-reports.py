#!/usr/bin/env python3
"""Byte-for-byte comparison of two builds' reports over every dump directory the project holds:
the dump fixtures (tests/fixtures), every real GPU capture (unpacked), and the lab's last outputs
(target/lab-out, after `cargo test -p ncclshim-integration-tests --test lab`). For a
restructuring that must not change what the report says (issue 38).

    scripts/compare-reports.py BASELINE_NCCLSHIM NEW_NCCLSHIM

Each directory is reported by both builds as JSON (`report --json`), as text (`report --color
never`) and as its story (`report --story`); the exit statuses and outputs must be identical,
except the `tool_version` field. Prints one line per difference and the count; exits 1 on any.
"""
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dump_dirs(scratch):
    dirs = sorted({p.parent for p in (ROOT / "tests" / "fixtures").rglob("*.ncclshim")})
    for tarball in sorted((ROOT / "tests" / "fixtures" / "real-gpu").glob("*/*.tar.gz")):
        into = scratch / tarball.parent.name / tarball.name.removesuffix(".tar.gz")
        into.mkdir(parents=True)
        with tarfile.open(tarball) as t:
            t.extractall(into, filter="data")
        dirs += sorted({p.parent for p in into.rglob("*.ncclshim")})
    lab = ROOT / "target" / "lab-out"
    if lab.is_dir():
        dirs += sorted({p.parent for p in lab.rglob("*.ncclshim")})
    return dirs


def run(binary, args):
    r = subprocess.run([binary, "report", *args], capture_output=True, text=True, timeout=600)
    out = r.stdout
    if "--json" in args:
        try:
            v = json.loads(out)
            v.pop("tool_version", None)
            out = json.dumps(v, sort_keys=False)
        except json.JSONDecodeError:
            pass
    return r.returncode, out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base, new = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        dirs = dump_dirs(Path(tmp))
        diffs = 0
        for d in dirs:
            for args in (["--json"], ["--color", "never"], ["--story", "--color", "never"]):
                a, b = run(base, [*args, str(d)]), run(new, [*args, str(d)])
                if a != b:
                    diffs += 1
                    first = next((i for i, (x, y) in enumerate(zip(a[1], b[1])) if x != y), min(len(a[1]), len(b[1])))
                    print(f"DIFF {d} {' '.join(args)}: exit {a[0]}/{b[0]}; at char {first}: {a[1][first:first+80]!r} / {b[1][first:first+80]!r}")
        print(f"{len(dirs)} dump directories, {3 * len(dirs)} reports by each build: {diffs} differ")
        sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
