#!/usr/bin/env python3
"""Extracts the WARN/error format strings NCCL prints, per release tag, from NCCL's git history.

Why: ncclshim's diagnosis classifies NCCL's own error texts (ncclGetLastError = the last WARN).
To know that every message NCCL can print is classified, we need the list of formats NCCL's
source contains, per version. This script produces that list as facts (the format text, the
source files it appears in, the versions that contain it) -- not NCCL's code.

What counts as a format:
  * the first argument of every WARN(...) call in src/ (the library; contrib/, plugins/ examples,
    docs/ and tests are not part of libnccl), string literals concatenated, with
      - macro parameters (e.g. `name` in SYSCHECK's "Call to " name " failed: %s") and
        stringified parameters (`#name`) turned into %s,
      - <inttypes.h> macros (PRIu64, PRIx64 ...) turned into their conversion (%lu, %lx ...);
    a WARN whose format is not a literal (WARN(buf)) is counted but not listed;
  * the WARNs inside the CUDA / driver / syscall check macros (checks.h, cudawrap.h, ibvwrap.cc,
    gdrwrap.h, nvmlwrap.cc ...) are WARN calls too, so they are covered by the same rule; the
    macro's name is recorded in the `macro` column.

Usage:
  scripts/extract-nccl-formats.py GIT_DIR OUT_TSV [--binary VERSION=STRINGS_FILE ...]

GIT_DIR is a bare clone of github.com/NVIDIA/nccl with its tags (the `fetch` tool gives one).
Tags v2.18.* .. v2.30.7 are read. --binary adds the format-like strings of a released binary
(`strings -n 6 libnccl.so.2`), attributed to subsystem "binary" unless the same format is
known from source; only strings containing a printf conversion or a known error phrase are kept.
"""

import argparse
import re
import subprocess
import sys
from collections import defaultdict, OrderedDict

FIRST = (2, 18, 0)
LAST = (2, 30, 7)

PRI = {
    "PRIu64": "%lu", "PRId64": "%ld", "PRIx64": "%lx", "PRIX64": "%lX", "PRIi64": "%li",
    "PRIu32": "%u", "PRId32": "%d", "PRIx32": "%x", "PRIX32": "%X", "PRIi32": "%i",
    "PRIu16": "%u", "PRIu8": "%u", "PRIuPTR": "%lu", "PRIxPTR": "%lx",
}


def git(gitdir, *args, binary=False):
    out = subprocess.run(["git", "--git-dir", gitdir, *args], check=True, capture_output=True)
    return out.stdout if binary else out.stdout.decode("utf-8", "replace")


def release_tags(gitdir):
    tags = []
    for t in git(gitdir, "tag").split():
        m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-(\d+)", t)
        if not m:
            continue
        v = tuple(int(x) for x in m.groups()[:3])
        if FIRST <= v <= LAST:
            tags.append((v, int(m.group(4)), t))
    tags.sort()
    # One entry per x.y.z: the highest -N packaging suffix.
    best = OrderedDict()
    for v, n, t in tags:
        best[v] = t
    return [(".".join(map(str, v)), t) for v, t in best.items()]


def strip_comments(src):
    """Removes // and /* */ comments, keeping string and char literals intact."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_args(src, start):
    """Splits the argument list of the call whose '(' is at src[start]; returns (args, end)."""
    depth, i, n = 0, start, len(src)
    args, cur = [], []
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            cur.append(src[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    return None, n


def unescape(s):
    return (
        s.replace("\\n", "\n").replace("\\t", " ").replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\")
    )


TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|(#?\s*[A-Za-z_][A-Za-z0-9_]*))')


def literal_format(arg, macro_params):
    """Concatenates the string literals of a format argument, or None when it is not a literal."""
    pos, parts, saw_literal = 0, [], False
    arg = arg.strip()
    while pos < len(arg):
        m = TOKEN.match(arg, pos)
        if not m:
            return None
        if m.group(1) is not None:
            parts.append(unescape(m.group(1)))
            saw_literal = True
        else:
            ident = m.group(2).lstrip("#").strip()
            if ident in PRI:
                parts.append(PRI[ident][1:])  # the "%" precedes the macro in the literal
            elif ident in macro_params:
                parts.append("%s")
            else:
                return None
        pos = m.end()
    if not saw_literal:
        return None
    text = "".join(parts).strip()
    return re.sub(r"\s+", " ", text)


MACRO_DEF = re.compile(r"#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)\(([^)]*)\)")
WARN_CALL = re.compile(r"(?<![A-Za-z0-9_])WARN\s*\(")


def formats_in(src):
    """Yields (format or None, enclosing macro name or '') for every WARN call in one file."""
    src = strip_comments(src.replace("\\\r\n", " ").replace("\\\n", " "))
    # Macro definitions span one logical line once continuations are joined.
    macro_spans = []
    for m in MACRO_DEF.finditer(src):
        end = src.find("\n", m.end())
        end = len(src) if end < 0 else end
        params = {p.strip() for p in m.group(2).split(",") if p.strip() and p.strip() != "..."}
        macro_spans.append((m.start(), end, m.group(1), params))
    for m in WARN_CALL.finditer(src):
        line_start = src.rfind("\n", 0, m.start()) + 1
        if re.match(r"\s*#\s*define\s+WARN\b", src[line_start:]):
            continue
        macro, params = "", set()
        for s, e, name, ps in macro_spans:
            if s <= m.start() < e:
                macro, params = name, ps
        args, _ = call_args(src, m.end() - 1)
        if not args or not args[0]:
            continue
        yield literal_format(args[0], params), macro


def subsystem(path):
    p = path.lower()
    rules = [
        ("src/bootstrap", "bootstrap"),
        ("src/init", "init"),
        ("src/transport/net_ib/gdaki", "gin"),
        ("src/transport/net_ib", "ib"),
        ("src/misc/ibvwrap", "ib"),
        ("src/misc/mlx5dvwrap", "ib"),
        ("src/transport/net_socket", "socket"),
        ("src/misc/socket", "socket"),
        ("src/os/linux_socket", "socket"),
        ("src/os/windows_socket", "socket"),
        ("src/misc/ipcsocket", "ipcsocket"),
        ("src/os/linux_ipcsocket", "ipcsocket"),
        ("src/os/windows_ipcsocket", "ipcsocket"),
        ("src/os/windows", "os/windows"),
        ("src/os/", "os"),
        ("src/net.cc", "transport/net"),
        ("src/mnnvl", "mnnvl"),
        ("src/include/ibvwrap", "ib"),
        ("src/misc/ibvsymbols", "ib"),
        ("src/misc/mlx5dvsymbols", "ib"),
        ("src/misc/strongstream", "cuda"),
        ("src/transport/gdaki", "gin"),
        ("src/ce_coll", "enqueue"),
        ("src/misc/tuner", "tuner"),
        ("src/misc/profiler", "profiler"),
        ("src/include/socket", "socket"),
        ("src/transport/shm", "shm"),
        ("src/misc/shmutils", "shm"),
        ("src/include/shmutils", "shm"),
        ("src/transport/p2p", "p2p"),
        ("src/transport/nvls", "nvls"),
        ("src/transport/coll_net", "collnet"),
        ("src/transport/net", "transport/net"),
        ("src/transport/generic", "transport/net"),
        ("src/transport/profiler", "profiler"),
        ("src/transport.cc", "transport"),
        ("src/transport/", "transport"),
        ("src/proxy", "proxy"),
        ("src/include/proxy", "proxy"),
        ("src/include/checks", "cuda"),
        ("src/include/cudawrap", "cuda"),
        ("src/misc/cudawrap", "cuda"),
        ("src/include/gdrwrap", "cuda"),
        ("src/misc/gdrwrap", "cuda"),
        ("src/misc/nvmlwrap", "nvml"),
        ("src/include/alloc", "alloc"),
        ("src/allocator", "alloc"),
        ("src/mem_manager", "alloc"),
        ("src/graph/", "topology"),
        ("src/plugin/tuner", "tuner"),
        ("src/plugin/profiler", "profiler"),
        ("src/plugin/net", "transport/net"),
        ("src/plugin/", "plugins"),
        ("src/include/plugin", "plugins"),
        ("src/enqueue", "enqueue"),
        ("src/collectives", "enqueue"),
        ("src/group", "group"),
        ("src/register", "register"),
        ("src/ras", "ras"),
        ("src/gin", "gin"),
        ("src/rma", "rma"),
        ("src/include/rma", "rma"),
        ("src/include/gin", "gin"),
        ("src/scheduler", "enqueue"),
        ("src/dev_runtime", "devcomm"),
        ("src/register", "register"),
        ("src/devcomm", "devcomm"),
        ("src/symmetric", "symmetric"),
        ("src/sym_kernels", "symmetric"),
        ("src/channel", "init"),
        ("src/misc/argcheck", "args"),
        ("src/include/argcheck", "args"),
        ("src/misc/param", "param"),
        ("src/param", "param"),
        ("src/include/param", "param"),
        ("src/misc/", "misc"),
        ("src/include/", "misc"),
        ("src/", "core"),
    ]
    for prefix, name in rules:
        if p.startswith(prefix):
            return name
    return "other"


def version_runs(present, order):
    """Compresses the set of versions containing a format into first..last runs over `order`."""
    runs, start, prev = [], None, None
    for v in order:
        if v in present:
            if start is None:
                start = v
            prev = v
        elif start is not None:
            runs.append(start if start == prev else f"{start}..{prev}")
            start = None
    if start is not None:
        runs.append(start if start == prev else f"{start}..{prev}")
    return ",".join(runs)


CONVERSION = re.compile(r"%[-+ #0]*[0-9*]*(?:\.[0-9*]+)?(?:hh|h|ll|l|z|j|t)?[diouxXeEfgGcsp]")
ERROR_PHRASE = re.compile(
    r"(?i)\b(fail|error|invalid|unable|cannot|could not|not found|mismatch|abort|timeout|timed out)"
)


def binary_strings(path):
    """The printable strings of a binary's .rodata (`strings` output), whitespace-normalised."""
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            s = re.sub(r"\s+", " ", line.strip())
            if 8 <= len(s) <= 400 and re.match(r"^[\x20-\x7e]+$", s):
                out.add(s)
    return out


def looks_like_error_format(s):
    """A string not known from source that still reads like an error format: a printf conversion
    and an error phrase, and not debug-log scaffolding (INFO_LOC prefixes, log headers)."""
    if not CONVERSION.search(s) or not ERROR_PHRASE.search(s) or s[0] in "\"#{[":
        return False
    if s.startswith("%s:%d") or any(k in s for k in ("NCCL INFO", "NCCL WARN", "NCCL TRACE", "NCCL CALL")):
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gitdir")
    ap.add_argument("out")
    ap.add_argument("--binary", action="append", default=[], help="VERSION=STRINGS_FILE")
    a = ap.parse_args()

    tags = release_tags(a.gitdir)
    order = [v for v, _ in tags]
    # format -> {files}, {versions}, {macros}
    files = defaultdict(set)
    versions = defaultdict(set)
    macros = defaultdict(set)
    per_version = OrderedDict()
    blob_cache = {}
    for v, tag in tags:
        listing = git(a.gitdir, "ls-tree", "-r", tag, "--", "src")
        count, nonliteral = set(), 0
        for line in listing.splitlines():
            meta, path = line.split("\t", 1)
            if not re.search(r"\.(h|hpp|c|cc|cpp|cu|cuh)$", path):
                continue
            blob = meta.split()[2]
            if blob not in blob_cache:
                src = git(a.gitdir, "cat-file", "-p", blob, binary=True).decode("utf-8", "replace")
                blob_cache[blob] = list(formats_in(src))
            for fmt, macro in blob_cache[blob]:
                if fmt is None:
                    nonliteral += 1
                    continue
                files[fmt].add(path)
                versions[fmt].add(v)
                if macro:
                    macros[fmt].add(macro)
                count.add(fmt)
        per_version[v] = (len(count), nonliteral)

    source_formats = set(files)
    # A binary string is the format itself, or an instance of a macro's format with the macro
    # argument expanded ("Call to stat failed: %s" for SYSCHECK's "Call to %s failed: %s").
    # Only formats of check macros can appear expanded, and only an identifier (a function name)
    # is substituted for the macro's parameter; every other conversion stays as written.
    as_regex = []
    for fmt in source_formats:
        if not macros[fmt]:
            continue
        parts = CONVERSION.split(fmt)
        literal = max(parts, key=len)
        conv = r"(?:%[a-z]+|[A-Za-z_][A-Za-z0-9_]*)"
        rx = re.compile("^" + conv.join(re.escape(p) for p in parts) + "$", re.S)
        as_regex.append((literal, rx, fmt))
    for spec in a.binary:
        v, path = spec.split("=", 1)
        order.append(v)
        hit = set()
        for s in binary_strings(path):
            known = [fmt for lit, rx, fmt in as_regex if lit in s and rx.match(s)]
            if s in source_formats:
                known = [s]
            if known:
                for fmt in known:
                    versions[fmt].add(v)
                    hit.add(fmt)
            elif looks_like_error_format(s):
                versions[s].add(v)
                hit.add(s)
                files.setdefault(s, set())
        per_version[v] = (len(hit), 0)

    with open(a.out, "w", encoding="utf-8") as out:
        out.write("# NCCL WARN/error formats per release, extracted by scripts/extract-nccl-formats.py\n")
        out.write("# from github.com/NVIDIA/nccl tags (src/ only) and `strings` of released binaries.\n")
        out.write("# Facts about NCCL's messages, not NCCL's code. Regenerate; do not edit by hand.\n")
        out.write("# versions in order: " + " ".join(order) + "\n")
        out.write("# formats per version (distinct, literal): "
                  + " ".join(f"{v}={c}" for v, (c, _) in per_version.items()) + "\n")
        out.write("# columns: format<TAB>subsystem<TAB>files<TAB>macro<TAB>versions (a..b = every listed version from a to b)\n")
        for fmt in sorted(files, key=lambda f: (min(subsystem(p) for p in files[f]) if files[f] else "binary", f)):
            subs = sorted({subsystem(p) for p in files[fmt]}) or ["binary"]
            fmt_cell = fmt.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            out.write("\t".join([
                fmt_cell,
                ",".join(subs),
                ",".join(sorted(files[fmt])) or "-",
                ",".join(sorted(macros[fmt])) or "-",
                version_runs(versions[fmt], order),
            ]) + "\n")
    for v, (c, nl) in per_version.items():
        print(f"{v}\t{c} formats\t{nl} non-literal WARN calls", file=sys.stderr)
    print(f"total distinct formats: {len(files)} (source {len(source_formats)})", file=sys.stderr)


if __name__ == "__main__":
    main()
