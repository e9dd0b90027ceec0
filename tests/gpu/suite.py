#!/usr/bin/env python3
"""The GPU suite v2: real multi-rank NCCL jobs on one GPU, each diagnosed by `ncclshim report`
and checked against what a correct report says; plus an overhead measurement that can resolve 1%.

    python3 tests/gpu/suite.py [--kit DIR] [--work DIR] [--capture FILE.tar.gz] [--only a,b]
                               [--no-overhead] [--rounds N] [--jobs N]

On a machine with one NVIDIA GPU and PyTorch and nothing else (no package registry is needed):
build the release artifacts beforehand (scripts/setup.sh) and take `target/release` along (or a
folder holding ncclshim, libncclshim.so and libnccl_profiler_ncclshim.so: --kit).

Every job comes from tests/gpu/checks.toml. Several ranks share the one GPU by each having its own
NCCL_HOSTID (NCCL then treats them as separate hosts joined by the socket transport over `lo`).
The launcher ends jobs the way torchrun does: when a rank exits non-zero, the others get SIGTERM a
moment later (SIGKILL 5 s after that); a job still running at its timeout gets the same (a hang
killed by the scheduler). Output: one `PASS name: ...` / `FAIL name: ...` line per check (`SKIP`
where the machine lacks what a job needs), the overhead figures, and `N passed, N failed`.

--capture packs every job's dumps, rank logs and PyTorch Flight Recorder dumps, with local paths
scrubbed from the logs, plus cases.json (each job's `what` and `expect` from the table) into one
archive, ready to unpack under tests/fixtures/real-gpu/<date>/ where collector-cli's real_gpu
tests check the same expectations in CI.

--dry-run-cpu runs the jobs with gloo on the CPU (no GPU, no NCCL): it exercises the launcher,
the checks and the capture on any machine; NCCL-specific expectations then fail, as they should.
"""
import argparse
import concurrent.futures
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
JOBS_PY = HERE / "jobs.py"
SYSTEM_NCCL = Path("/usr/lib/x86_64-linux-gnu/libnccl.so.2")
# How long survivors get after a rank fails before SIGTERM (torchrun's monitor interval is 0.1-5 s)
# and after SIGTERM before SIGKILL.
FAILURE_GRACE_S = 2.0
KILL_GRACE_S = 5.0

LOG_LOCK = threading.Lock()
LOG_LINES = []


def out(line=""):
    with LOG_LOCK:
        print(line, flush=True)
        LOG_LINES.append(line)


class Kit:
    def __init__(self, folder):
        folder = Path(folder).resolve()
        self.cli = folder / "ncclshim"
        self.shim = folder / "libncclshim.so"
        self.plugin = folder / "libnccl_profiler_ncclshim.so"
        missing = [p for p in (self.cli, self.shim, self.plugin) if not p.exists()]
        if missing:
            sys.exit(f"missing {', '.join(map(str, missing))}: build with scripts/setup.sh and carry target/release")


def load_table():
    if tomllib is None:
        sys.exit("the suite needs Python 3.11 or later (tomllib reads tests/gpu/checks.toml)")
    with open(HERE / "checks.toml", "rb") as f:
        return tomllib.load(f)["job"]


def probe(dry_cpu):
    """What this machine has: versions, backends, CuPy, a system libnccl."""
    code = r"""
import json, torch, torch.distributed as dist
have = {}
for b in ("nccl", "nccl2", "gloo"):
    try:
        have[b] = bool(dist.is_backend_available(b))
    except Exception:
        have[b] = False
try:
    import cupy  # noqa: F401
    cupy_ok = True
except Exception:
    cupy_ok = False
nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
                  "backends": [b for b, ok in have.items() if ok], "cupy": cupy_ok,
                  "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"PyTorch does not load here: {r.stderr.strip().splitlines()[-1:]}")
    facts = json.loads(r.stdout.strip().splitlines()[-1])
    facts["system_nccl"] = None
    if SYSTEM_NCCL.exists() and not dry_cpu:
        code = (
            "import ctypes,sys; v=ctypes.c_int(); "
            f"ctypes.CDLL('{SYSTEM_NCCL}').ncclGetVersion(ctypes.byref(v)); print(v.value)"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            facts["system_nccl"] = r.stdout.strip()
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        facts["nvidia_smi"] = r.stdout.strip()
    facts["python"] = sys.version.split()[0]
    facts["kernel"] = os.uname().release
    return facts


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid):
    """Every live process in session sid (the launcher starts each rank in its own session, so
    this reaches what `ncclshim run` started in a process group of its own too)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:  # field 6 of stat: the session id
            pids.append(int(entry))
    return pids


def signal_session(sid, sig):
    for pid in session_pids(sid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class LiveScrape:
    """`ncclshim exporter` over the job's dump folder while the job runs (the job's `scrape`
    table: `stall_after_s`, `from_s`, `every_s`): /metrics fetched over HTTP every `every_s`
    from `from_s` on, each scrape kept as metrics/scrape-NN-Ts.txt (packed into the capture)."""

    def __init__(self, job, cfg):
        self.job, self.cfg = job, cfg
        self.dir = job.dir / "metrics"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.err_path = self.dir / "exporter.err"
        self.proc = subprocess.Popen(
            [str(job.kit.cli), "exporter", "--listen", "127.0.0.1:0", "--stall-after", f"{cfg.get('stall_after_s', 3)}s", str(job.dir / "dumps")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.err_path, "w"),
            start_new_session=True,
        )
        self.addr, self.count, self.next_at = None, 0, float(cfg.get("from_s", 5))
        stop = time.monotonic() + 10
        while self.addr is None and time.monotonic() < stop and self.proc.poll() is None:
            m = re.search(r"http://([^/\s]+)", self.err_path.read_text())
            self.addr = m.group(1) if m else None
            time.sleep(0.05)

    def tick(self, elapsed):
        if self.addr is None or elapsed < self.next_at:
            return
        self.next_at = elapsed + float(self.cfg.get("every_s", 2))
        self.count += 1
        name = f"scrape-{self.count:02d}-{int(elapsed)}s.txt"
        try:
            body = urllib.request.urlopen(f"http://{self.addr}/metrics", timeout=10).read()
        except Exception as e:  # noqa: BLE001 -- the check says what went wrong
            body = f"# scrape failed: {e!r}\n".encode()
        (self.dir / name).write_bytes(body)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        (self.dir / "exporter.json").write_text(json.dumps({"addr": self.addr, "scrapes": self.count, "exit": code}))


class Job:
    def __init__(self, spec, backend, args, kit, facts):
        self.spec = spec
        self.backend = backend
        self.name = spec["name"] + ("" if backend == "nccl" else f"-{backend}")
        self.dir = Path(args.work) / "jobs" / self.name
        self.args = args
        self.kit = kit
        self.facts = facts

    def rank_env(self, rank, port):
        spec, d = self.spec, self.dir
        env = dict(os.environ)
        for k in ("LD_PRELOAD", "NCCL_PROFILER_PLUGIN", "NCCLSHIM_DIR"):
            env.pop(k, None)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(spec["ranks"]),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NCCL_SOCKET_IFNAME="lo",
            NCCL_DEBUG="WARN",
            GPU_JOB_BACKEND=self.backend,
            TORCH_FR_BUFFER_SIZE="2000",
            TORCH_FR_DUMP_TEMP_FILE=str(d / "flight-recorder" / "rank_"),
            PYTHONUNBUFFERED="1",
        )
        if self.args.dry_run_cpu:
            env.update(GPU_JOB_DEVICE="cpu", GPU_JOB_BACKEND="gloo")
        extra = dict(spec.get("env", {}))
        extra.update(spec.get("rank_env", {}).get(str(rank), {}))
        same_host = extra.pop("GPU_JOB_SAME_HOSTID", None) == "1"
        system_nccl = extra.pop("GPU_JOB_PRELOAD_SYSTEM_NCCL", None) == "1"
        if not same_host:
            env["NCCL_HOSTID"] = f"{self.name}-node{rank}"
        env.update(extra)
        runner = spec.get("runner", "env")
        argv = [sys.executable, str(JOBS_PY), spec["scenario"]]
        if runner == "ncclshim-run" and not system_nccl:
            argv = [str(self.kit.cli), "run", "--dir", str(d / "dumps"), "--"] + argv
        else:
            preload = [str(self.kit.shim)] + ([str(SYSTEM_NCCL)] if system_nccl else [])
            env.update(
                LD_PRELOAD=":".join(preload),
                NCCL_PROFILER_PLUGIN=str(self.kit.plugin),
                NCCLSHIM_DIR=str(d / "dumps"),
            )
        return env, argv

    def launch(self):
        """Runs every rank; returns (per-rank exit: code or -signal, how it ended)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        for sub in ("dumps", "logs", "flight-recorder"):
            (self.dir / sub).mkdir(parents=True)
        port = free_port()
        scrape = LiveScrape(self, self.spec["scrape"]) if "scrape" in self.spec else None
        procs = []
        for rank in range(self.spec["ranks"]):
            env, argv = self.rank_env(rank, port)
            logs = self.dir / "logs"
            procs.append(
                subprocess.Popen(
                    argv,
                    env=env,
                    cwd=self.dir,
                    stdin=subprocess.DEVNULL,
                    stdout=open(logs / f"rank{rank}.out", "w"),
                    stderr=open(logs / f"rank{rank}.err", "w"),
                    start_new_session=True,
                )
            )
        start = time.monotonic()
        deadline = start + self.spec["timeout_s"]
        failed_at, ended = None, "every rank exited"
        while True:
            states = [p.poll() for p in procs]  # every rank polled: a failure shows while others run
            if all(s is not None for s in states):
                break
            time.sleep(0.1)
            now = time.monotonic()
            if scrape is not None:
                scrape.tick(now - start)
            if failed_at is None and any(s not in (None, 0) for s in states):
                failed_at = now
            if now >= deadline:
                ended = f"timeout {self.spec['timeout_s']} s: SIGTERM to the ranks still running"
                break
            if failed_at is not None and now - failed_at >= FAILURE_GRACE_S:
                ended = "a rank failed: SIGTERM to the others (as torchrun)"
                break
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            signal_session(p.pid, signal.SIGTERM)
        stop = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < stop and any(p.poll() is None for p in alive):
            time.sleep(0.1)
        if any(p.poll() is None for p in alive):
            ended += "; SIGKILL 5 s later"
        for p in procs:
            signal_session(p.pid, signal.SIGKILL)  # stragglers a rank left behind, too
            p.wait()
        if scrape is not None:
            scrape.stop()
        return [p.returncode for p in procs], ended, time.monotonic() - start

    def report(self):
        d = self.dir / "dumps"
        cmd = [str(self.kit.cli), "report", "--color", "never"]
        text = subprocess.run(cmd + [str(d)], capture_output=True, text=True)
        js = subprocess.run(cmd + ["--json", str(d)], capture_output=True, text=True)
        (self.dir / "report.txt").write_text(text.stdout + text.stderr)
        (self.dir / "report.json").write_text(js.stdout)
        try:
            return js.returncode, text.returncode, json.loads(js.stdout)
        except json.JSONDecodeError:
            return js.returncode, text.returncode, None


def primary_text(report, primaries):
    """What `words` are matched against: the primaries' titles and evidence and the first-failure
    line (the same as collector-cli/tests/real_gpu.rs)."""
    parts = []
    for f in primaries:
        parts.append(f.get("title") or "")
        parts += [e.get("text") or "" for e in f.get("evidence") or []]
    first = report.get("first_failure") or {}
    parts += [first[k] for k in ("what", "call", "error_text") if isinstance(first.get(k), str)]
    return "\n".join(parts)


def judge(expect, code, text_code, report):
    """Problems with the report against `expect` (empty: right). Same rules as real_gpu.rs."""
    if report is None:
        return ["report --json gave no JSON"]
    problems = []
    if code != text_code:
        problems.append(f"text and JSON reports exit {text_code} / {code}")
    if code != expect["exit"]:
        problems.append(f"report exit {code}, want {expect['exit']}")
    findings = report.get("findings") or []
    primaries = [f for f in findings if f.get("severity") == "primary"]
    if expect["exit"] == 0:
        above = [f["id"] for f in findings if f.get("severity") != "advisory"]
        if above:
            problems.append(f"healthy job has findings {above}")
    elif not primaries:
        problems.append("no primary finding")
    if "primary_ranks" in expect:
        got = sorted({r for f in primaries for r in f.get("ranks") or []})
        if got != sorted(expect["primary_ranks"]):
            problems.append(f"primary ranks {got}, want {expect['primary_ranks']}")
    ids = [f.get("id") for f in primaries]
    if "primary_id" in expect and expect["primary_id"] not in ids:
        problems.append(f"primary ids {ids}, want {expect['primary_id']}")
    catalogs = [f.get("catalog") or "none" for f in primaries]
    if "primary_catalog" in expect and expect["primary_catalog"] not in catalogs:
        problems.append(f"primary catalogs {catalogs}, want {expect['primary_catalog']}")
    if "primary_catalog_only" in expect and any(c != expect["primary_catalog_only"] for c in catalogs):
        problems.append(f"primary catalogs {catalogs}, want only {expect['primary_catalog_only']}")
    hay = primary_text(report, primaries)
    for w in expect.get("words", []):
        if not re.search(w, hay, re.I):
            problems.append(f"no primary says /{w}/")
    return problems


def dump_records(kit, path):
    r = subprocess.run([str(kit.cli), "dump", str(path)], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def extra_ring_accounting(job):
    """The dump's own accounting covers every call: for each thread ring, records kept + lost
    (+ torn) = records written (its head), and the main thread's ring wrote at least the
    20,000 all_reduces the workload made (it says how many)."""
    said = re.search(r"CALLS ncclAllReduce=(\d+)", (job.dir / "logs" / "rank0.out").read_text())
    if not said:
        return "the workload did not say how many calls it made", ""
    made = int(said.group(1))
    rings, kept_ar, problems = [], 0, []
    for f in (job.dir / "dumps").glob("*.shim.ncclshim"):
        for rec in dump_records(job.kit, f):
            if isinstance(rec.get("ring"), dict):
                rings.append(rec["ring"])
            elif rec.get("call") == "ncclAllReduce" and rec.get("kind") == "call":
                kept_ar += 1
    rings = [r for r in rings if not r.get("shared")]
    for r in rings:
        if r["records"] + r["lost"] + r.get("torn", 0) != r["head"]:
            problems.append(f"ring {r['index']}: kept {r['records']} + lost {r['lost']} != written {r['head']}")
    written = max((r["head"] for r in rings), default=0)
    lost = sum(r["lost"] for r in rings)
    if written < made:
        problems.append(f"busiest ring wrote {written} records for {made} calls")
    summary = f"{made} calls made; kept {kept_ar} ncclAllReduce records, {lost} lost to the wrap, busiest ring wrote {written}"
    return "; ".join(problems + [summary]) if problems else None, summary


def extra_cumem_records(job):
    n = sum(
        1
        for f in (job.dir / "dumps").glob("*.shim.ncclshim")
        for rec in dump_records(job.kit, f)
        if str(rec.get("call", "")).startswith("cuMem")
    )
    return (None if n > 0 else "no cuMem record"), f"{n} cuMem records"


def extra_trace(job):
    t = job.dir / "trace.json"
    r = subprocess.run([str(job.kit.cli), "trace", str(job.dir / "dumps"), "-o", str(t)], capture_output=True, text=True)
    try:
        events = json.loads(t.read_text())["traceEvents"]
    except (OSError, ValueError, KeyError):
        return f"ncclshim trace failed: {r.stderr.strip()[:200]}", ""
    return (None if events else "empty trace"), f"{len(events)} trace events"


def extra_flight_recorder(job):
    files = sorted(p.name for p in (job.dir / "flight-recorder").iterdir())
    # A healthy job writes no Flight Recorder dump (it dumps on timeout); say what there is.
    if job.spec["expect"]["exit"] != 0 and not files:
        return "no Flight Recorder dump", ""
    return None, f"flight recorder files: {files or 'none'}"


def prometheus_samples(text):
    """(name, labels, value) of every sample in a scrape: prometheus_client's own parser where
    the machine has it (it rejects what Prometheus would), else a plain reading of the lines."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        out = []
        for line in text.splitlines():
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
            if m:
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
                out.append((m.group(1), labels, float(m.group(3))))
        return out
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def extra_exporter(job):
    """A scrape during the stall says the ranks waiting in NCCL are stalled and names the rank
    they wait for (the table's `scrape.stalled_waiting_for`); every scrape parses."""
    want = job.spec["scrape"]["stalled_waiting_for"]
    scrapes = sorted((job.dir / "metrics").glob("scrape-*.txt"))
    if not scrapes:
        return "no scrape", ""
    first_stall, cpu = None, []
    for path in scrapes:
        try:
            samples = prometheus_samples(path.read_text())
        except Exception as e:  # noqa: BLE001
            return f"{path.name} does not parse: {e}", ""
        cpu += [v for n, _, v in samples if n == "ncclshim_exporter_scrape_cpu_seconds"]
        stalled = {(l.get("rank"), l.get("comm")) for n, l, v in samples if n == "ncclshim_comm_stalled" and v == 1}
        waits = {l.get("rank"): v for n, l, v in samples if n == "ncclshim_comm_stalled_waiting_for_rank"}
        ranks = {r for r, _ in stalled}
        if first_stall is None and all(str(r) in ranks and waits.get(str(r)) == float(w) for r, w in want.items()):
            first_stall = path.name
    info = json.loads((job.dir / "metrics" / "exporter.json").read_text())
    note = f"{len(scrapes)} scrapes, stall seen first in {first_stall}, exporter exit {info['exit']}"
    if cpu:
        note += f", scrape CPU median {statistics.median(cpu) * 1000:.1f} ms"
    problems = []
    if first_stall is None:
        problems.append(f"no scrape shows ranks {sorted(want)} stalled waiting for {sorted(set(want.values()))}")
    if info["exit"] != 0:
        problems.append(f"exporter exit {info['exit']} on SIGTERM")
    return "; ".join(problems) or None, note


def extra_summarize(job):
    """`ncclshim summarize` of the job's dumps (one node's processes) gives the same report JSON
    as the dumps themselves; its time and size per rank are noted."""
    folder = job.dir / "summary"
    folder.mkdir(exist_ok=True)
    summary = folder / "node.ncclshim-summary"
    t = time.monotonic()
    r = subprocess.run([str(job.kit.cli), "summarize", str(job.dir / "dumps"), "-o", str(summary)], capture_output=True, text=True)
    took = time.monotonic() - t
    if r.returncode != 0:
        return f"summarize exit {r.returncode}: {r.stderr.strip()[:200]}", ""
    js = subprocess.run([str(job.kit.cli), "report", "--color", "never", "--json", str(folder)], capture_output=True, text=True)
    direct = json.loads((job.dir / "report.json").read_text() or "null")
    try:
        from_summary = json.loads(js.stdout)
    except json.JSONDecodeError:
        return "report on the summary gave no JSON", ""
    size = summary.stat().st_size
    note = f"summarize {took:.2f} s, {size / job.spec['ranks'] / 1000:.1f} KB per rank"
    if from_summary == direct:
        return None, note
    keys = sorted(k for k in set(direct or {}) | set(from_summary or {}) if (direct or {}).get(k) != (from_summary or {}).get(k))
    return f"the report on the summary differs from the direct report in {keys}", note


EXTRAS = {
    "ring-accounting": extra_ring_accounting,
    "cumem-records": extra_cumem_records,
    "trace": extra_trace,
    "flight-recorder": extra_flight_recorder,
    "exporter": extra_exporter,
    "summarize": extra_summarize,
}


def missing_needs(spec, backend, facts):
    for need in spec.get("needs", []):
        if need == "cupy" and not facts["cupy"]:
            return "CuPy is not installed"
        if need == "system-nccl" and not facts["system_nccl"]:
            return f"no {SYSTEM_NCCL}"
    if backend not in facts["backends"]:
        return f"PyTorch {facts['torch']} has no {backend} backend"
    return None


def run_job(job):
    """Launch, report, judge; returns (passed, line, case for cases.json). A fault of the suite
    itself is that job's FAIL line, not the end of the run."""
    try:
        return judge_job(job)
    except Exception as e:  # noqa: BLE001
        case = {"name": job.name, "what": job.spec["what"], "expect": job.spec["expect"], "observed": {"suite_error": repr(e)}}
        return False, f"FAIL {job.name}: the suite failed on it: {e!r}", case


def judge_job(job):
    exits, ended, wall = job.launch()
    code, text_code, report = job.report()
    expect = job.spec["expect"]
    problems = judge(expect, code, text_code, report)
    notes = []
    for extra in job.spec.get("extra", []):
        problem, note = EXTRAS[extra](job)
        if problem:
            problems.append(f"{extra}: {problem}")
        if note:
            notes.append(note)
    primaries = [
        {"id": f.get("id"), "ranks": f.get("ranks"), "catalog": f.get("catalog")}
        for f in (report or {}).get("findings") or []
        if f.get("severity") == "primary"
    ]
    observed = {"exits": exits, "ended": ended, "wall_s": round(wall, 1), "report_exit": code, "primary": primaries}
    (job.dir / "observed.json").write_text(json.dumps(observed, indent=1))
    detail = f"exits {exits} ({ended}, {wall:.0f} s); report exit {code}; primary {[(p['id'], p['ranks']) for p in primaries]}"
    if notes:
        detail += "; " + "; ".join(notes)
    if problems:
        detail = "; ".join(problems) + " -- " + detail
    case = {"name": job.name, "what": job.spec["what"], "expect": expect, "observed": observed}
    return not problems, f"{'PASS' if not problems else 'FAIL'} {job.name}: {detail}", case


def order_stat_ci(values, confidence=0.95):
    """Distribution-free interval for the median from order statistics (binomial)."""
    v = sorted(values)
    n = len(v)
    alpha = (1 - confidence) / 2
    k, cum = 0, 0.0
    while True:  # largest k with P(Binomial(n, 1/2) < k) <= alpha
        p = math.comb(n, k) / 2**n
        if cum + p > alpha:
            break
        cum += p
        k += 1
    k = max(k, 1)
    return v[k - 1], v[n - k]


BENCH_CONFIGS = ["plain", "plain-again", "plugin", "shim", "both"]


def overhead(args, kit):
    """Per-op cost of shim, plugin and both against plain (and plain against a second plain
    job, the A/A control that shows the noise), in 2-rank jobs on the one GPU. Every
    configuration is a long-lived job; the controller asks each in turn for one block per round,
    rotating the order, so the configurations alternate within seconds of each other."""
    base = Path(args.work) / "bench"
    shutil.rmtree(base, ignore_errors=True)
    jobs = {}
    for config in BENCH_CONFIGS:
        d = base / config
        (d / "dumps").mkdir(parents=True)
        port = free_port()
        ranks = []
        for rank in range(args.bench_ranks):
            env = dict(os.environ)
            for k in ("LD_PRELOAD", "NCCL_PROFILER_PLUGIN"):
                env.pop(k, None)
            env.update(
                RANK=str(rank),
                WORLD_SIZE=str(args.bench_ranks),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                NCCL_SOCKET_IFNAME="lo",
                NCCL_HOSTID=f"bench-{config}-{rank}",
                NCCLSHIM_DIR=str(d / "dumps"),
                GPU_JOB_BACKEND="nccl",
                GPU_JOB_TIMEOUT_S="900",
                PYTHONUNBUFFERED="1",
            )
            if args.dry_run_cpu:
                env.update(GPU_JOB_DEVICE="cpu", GPU_JOB_BACKEND="gloo")
            if config in ("shim", "both"):
                env["LD_PRELOAD"] = str(kit.shim)
            if config in ("plugin", "both"):
                env["NCCL_PROFILER_PLUGIN"] = str(kit.plugin)
            ranks.append(
                subprocess.Popen(
                    [sys.executable, str(JOBS_PY), "bench"],
                    env=env,
                    stdin=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                    stdout=subprocess.PIPE if rank == 0 else open(d / f"rank{rank}.out", "w"),
                    stderr=open(d / f"rank{rank}.err", "w"),
                    text=True,
                    start_new_session=True,
                )
            )
        jobs[config] = ranks

    def ask(config, kind, n):
        p = jobs[config][0]
        p.stdin.write(f"{kind} {n}\n")
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"bench job {config} ended: {(base / config / 'rank0.err').read_text()[-500:]}")
            if line.startswith("RESULT "):
                f = line.split()
                return float(f[3]), float(f[4])

    results = {}
    try:
        for config in BENCH_CONFIGS:  # warm-up, and the block sizes from the plain job
            for kind, n in (("ar8", 200), ("ar64m", 3), ("ddp", 5)):
                results[(config, kind, "warm")] = ask(config, kind, n)[0] / n
        target = {"ar8": 0.15, "ar64m": 0.3, "ddp": 0.15}
        sizes = {
            kind: max(lo, min(hi, round(target[kind] / results[("plain", kind, "warm")])))
            for kind, lo, hi in (("ar8", 50, 5000), ("ar64m", 3, 200), ("ddp", 10, 10))
        }
        per_op = {(c, k): [] for c in BENCH_CONFIGS for k in sizes}
        issue = {(c, k): [] for c in BENCH_CONFIGS for k in sizes}
        for rnd in range(args.rounds):
            order = BENCH_CONFIGS[rnd % len(BENCH_CONFIGS) :] + BENCH_CONFIGS[: rnd % len(BENCH_CONFIGS)]
            for kind, n in sizes.items():
                for config in order:
                    whole, issued = ask(config, kind, n)
                    per_op[(config, kind)].append(whole / n)
                    issue[(config, kind)].append(issued / n)
    finally:
        for ranks in jobs.values():
            try:
                ranks[0].stdin.write("quit\n")
                ranks[0].stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
        for ranks in jobs.values():
            for p in ranks:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    signal_session(p.pid, signal.SIGKILL)
                    p.wait()
    figures = {
        "ranks": args.bench_ranks,
        "rounds": args.rounds,
        "block_ops": sizes,
        "per_op_s": {f"{c}/{k}": v for (c, k), v in per_op.items()},
        "issue_per_op_s": {f"{c}/{k}": v for (c, k), v in issue.items()},
    }
    label = {"ar8": "all_reduce 8 B", "ar64m": "all_reduce 64 MiB", "ddp": "DDP step (4x Linear 1024)"}
    for kind in sizes:
        for what, table in (("per op", per_op), ("issue only", issue)):
            plain = table[("plain", kind)]
            out(f"overhead {args.bench_ranks}-rank {label[kind]}, {what}: plain median {statistics.median(plain) * 1e6:.2f} us ({sizes[kind]} ops per block, {args.rounds} alternated rounds)")
            for config in BENCH_CONFIGS[1:]:
                ratios = [c / p for c, p in zip(table[(config, kind)], plain)]
                med = statistics.median(ratios)
                lo, hi = order_stat_ci(ratios)
                verdict = "below the noise (the interval holds 1)" if lo <= 1 <= hi else ("slower" if lo > 1 else "faster")
                out(f"overhead {args.bench_ranks}-rank {label[kind]}, {what}: {config}/plain median {med:.4f}, 95% interval [{lo:.4f}, {hi:.4f}]: {verdict}")
                figures[f"{config}/plain/{kind}/{what}"] = {"median": med, "ci95": [lo, hi]}
    (Path(args.work) / f"overhead-{args.bench_ranks}rank.json").write_text(json.dumps(figures, indent=1))
    return figures


def scrub(text, work):
    for path, name in ((str(ROOT), "<repo>"), (str(Path(work).resolve()), "<work>"), (os.path.expanduser("~"), "<home>")):
        if path and path != "/":
            text = text.replace(path, name)
    return text


def pack_capture(args, cases, facts):
    """One archive: CAPTURE/NAME.tar.gz per job (NAME/dumps, NAME/logs, NAME/flight-recorder),
    cases.json, env.json and the suite's log."""
    date = args.capture_name or time.strftime("%Y-%m-%d")
    buf_path = Path(args.capture)
    buf_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(buf_path, "w:gz") as outer:

        def add_bytes(name, data):
            info = tarfile.TarInfo(f"{date}/{name}")
            info.size = len(data)
            info.mtime = int(time.time())
            outer.addfile(info, io.BytesIO(data))

        for case in cases:
            name = case["name"]
            jobdir = Path(args.work) / "jobs" / name
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w:gz") as t:
                for sub in ("dumps", "flight-recorder", "metrics"):
                    if (jobdir / sub).is_dir() and any((jobdir / sub).iterdir()):
                        t.add(jobdir / sub, arcname=f"{name}/{sub}")
                for log in sorted((jobdir / "logs").iterdir()):
                    data = scrub(log.read_text(errors="replace"), args.work).encode()
                    info = tarfile.TarInfo(f"{name}/logs/{log.name}")
                    info.size = len(data)
                    info.mtime = int(log.stat().st_mtime)
                    t.addfile(info, io.BytesIO(data))
            add_bytes(f"{name}.tar.gz", inner.getvalue())
        add_bytes("cases.json", json.dumps(cases, indent=1).encode())
        add_bytes("env.json", json.dumps(facts, indent=1).encode())
        add_bytes("suite.log", scrub("\n".join(LOG_LINES) + "\n", args.work).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", default=str(ROOT / "target" / "release"))
    ap.add_argument("--work", default=str(ROOT / "gpu-suite-out"))
    ap.add_argument("--capture", help="pack every job's dumps, logs and Flight Recorder dumps into this .tar.gz")
    ap.add_argument("--capture-name", help="the folder inside the capture (default: today's date)")
    ap.add_argument("--only", help="comma-separated job names")
    ap.add_argument("--no-overhead", action="store_true")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--bench-ranks", type=int, default=2, help="ranks of each overhead job (1: the host's cost alone, no GPU time-slicing between ranks)")
    ap.add_argument("--jobs", type=int, default=4, help="jobs run at once (exclusive ones alone)")
    ap.add_argument("--dry-run-cpu", action="store_true")
    args = ap.parse_args()
    kit = Kit(args.kit)
    table = load_table()
    t0 = time.monotonic()
    facts = probe(args.dry_run_cpu)
    out("== machine")
    for k in ("nvidia_smi", "gpu", "torch", "cuda", "nccl", "system_nccl", "backends", "cupy", "python", "kernel"):
        out(f"{k}: {facts.get(k)}")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    shared, exclusive = [], []
    for spec in table:
        if only and spec["name"] not in only:
            continue
        for backend in spec.get("backends", ["nccl"]):
            if args.dry_run_cpu:
                backend = "gloo" if backend == "nccl" else backend
            why = missing_needs(spec, backend, facts)
            name = spec["name"] + ("" if backend in ("nccl", "gloo") else f"-{backend}")
            if why:
                out(f"SKIP {name}: {why}")
                continue
            job = Job(spec, "nccl" if backend == "gloo" else backend, args, kit, facts)
            (exclusive if spec.get("exclusive") else shared).append(job)
    passed = failed = 0
    cases = []

    def record(result):
        nonlocal passed, failed
        ok, line, case = result
        out(line)
        cases.append(case)
        passed, failed = passed + ok, failed + (not ok)

    out("== jobs")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for fut in concurrent.futures.as_completed([pool.submit(run_job, j) for j in shared]):
            record(fut.result())
    for job in exclusive:
        record(run_job(job))
    if args.capture:  # before the overhead runs: the jobs' captures are kept whatever follows
        cases.sort(key=lambda c: c["name"])
        pack_capture(args, cases, facts)
        out(f"capture: {args.capture}")
    if not args.no_overhead:
        out("== overhead")
        try:
            overhead(args, kit)
        except Exception as e:  # the jobs' results stand; say why the figures are missing
            out(f"FAIL overhead: {e}")
            failed += 1
    out(f"{passed} passed, {failed} failed ({time.monotonic() - t0:.0f} s)")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
