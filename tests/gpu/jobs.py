"""One rank of a GPU-suite job (tests/gpu/suite.py starts every rank of every job with this).

usage: jobs.py SCENARIO
The launcher sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (TCP rendezvous on 127.0.0.1),
NCCL_HOSTID (one per rank: several ranks on one GPU through the socket transport) and
GPU_JOB_BACKEND ("nccl", "nccl2"; "gloo" with GPU_JOB_DEVICE=cpu for a dry run of the suite's
plumbing on a machine without a GPU). GPU_JOB_TIMEOUT_S sets PyTorch's collective timeout (its
watchdog). Collective numbers in messages count from 1.

Scenarios (what each does is also said, per job, in tests/gpu/checks.toml):
  healthy            every collective kind, all_to_all, batch p2p ring, a subgroup; exits 0
  short-loop         5 all_reduces; exits 0 (failures come from the environment)
  tight-loop         20,000 all_reduces without a sync in between (the thread ring wraps)
  laggard            the last rank skips all_reduce #11 and sleeps
  crash-sigkill      the last rank SIGKILLs itself after 10 all_reduces
  crash-segv         the last rank dereferences NULL after 10 all_reduces
  exception          the last rank raises after 10 all_reduces (exit 1)
  exit-early         the last rank calls sys.exit(0) after 10 all_reduces
  count-mismatch     all_reduce #6 is 4x larger on the last rank
  op-mismatch        collective #6 is a broadcast on the last rank, an all_reduce elsewhere
  p2p-size-mismatch  rank 0 sends 4,096 floats to rank 1, which receives 1,024
  oom-before-init    fill the GPU's memory, then initialise NCCL
  ipc-open-failed    open a garbage CUDA IPC handle after NCCL init (CuPy), exit 1 on its error
  bench              overhead server: rank 0 reads commands on stdin, prints RESULT lines
"""
import ctypes
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LAST = WORLD - 1
BACKEND = os.environ.get("GPU_JOB_BACKEND", "nccl")
ON_CPU = os.environ.get("GPU_JOB_DEVICE") == "cpu"
DEVICE = torch.device("cpu") if ON_CPU else torch.device("cuda", 0)


def say(*what):
    print(f"[rank {RANK}]", *what, flush=True)


def init():
    if not ON_CPU:
        torch.cuda.set_device(0)
    kw = {}
    if os.environ.get("GPU_JOB_TIMEOUT_S"):
        kw["timeout"] = timedelta(seconds=float(os.environ["GPU_JOB_TIMEOUT_S"]))
    if not ON_CPU:
        kw["device_id"] = DEVICE  # eager NCCL init, as production jobs do
    dist.init_process_group(
        BACKEND,
        init_method=f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}",
        rank=RANK,
        world_size=WORLD,
        **kw,
    )
    say("READY", BACKEND)


def sync():
    if not ON_CPU:
        torch.cuda.synchronize()


def finish():
    sync()
    dist.destroy_process_group()
    say("DONE")


def ones(n):
    return torch.ones(n, device=DEVICE)


def all_reduce_loop(n, before=None):
    """n all_reduces with a sync after each; before(i) runs first (0-based i) and may act."""
    x = ones(1024)
    for i in range(n):
        if before is not None:
            before(i)
        x.fill_(1)
        dist.all_reduce(x)
        sync()
        assert float(x[0]) == WORLD, f"all_reduce #{i + 1} gave {float(x[0])}"
    return x


def healthy():
    init()
    sub = dist.new_group([0, 1]) if WORLD > 2 else None
    n = 1024
    for i in range(12):
        x = ones(n)
        dist.all_reduce(x)
        assert float(x[0]) == WORLD
        gathered = [torch.empty_like(x) for _ in range(WORLD)]
        dist.all_gather(gathered, x)
        flat = torch.empty(WORLD * n, device=DEVICE)
        dist.all_gather_into_tensor(flat, x)
        part = torch.empty(n, device=DEVICE)
        dist.reduce_scatter_tensor(part, flat)
        dist.reduce(x, dst=0)
        dist.broadcast(x, src=0)
        send = torch.arange(WORLD * 256, dtype=torch.float32, device=DEVICE)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
        got = torch.empty(n, device=DEVICE)
        ops = [dist.P2POp(dist.isend, ones(n), right), dist.P2POp(dist.irecv, got, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        if sub is not None and RANK in (0, 1):
            y = ones(n)
            dist.all_reduce(y, group=sub)
            assert float(y[0]) == 2
        sync()
    say("collective rounds=12")
    finish()


def short_loop():
    init()
    all_reduce_loop(5)
    finish()


def tight_loop():
    init()
    x = ones(2)
    calls = 20000
    for _ in range(calls):
        dist.all_reduce(x)
    sync()
    say(f"CALLS ncclAllReduce={calls}")
    finish()


def fail_after_10(act):
    """The last rank acts before all_reduce #11; every rank means to do 20."""
    init()

    def before(i):
        if RANK == LAST and i == 10:
            act()

    all_reduce_loop(20, before)
    finish()


def laggard():
    def lag():
        say("lagging: skipping all_reduce #11")
        time.sleep(3600)

    fail_after_10(lag)


def crash_sigkill():
    fail_after_10(lambda: (say("SIGKILL to myself"), os.kill(os.getpid(), signal.SIGKILL)))


def crash_segv():
    fail_after_10(lambda: (say("reading address 0"), ctypes.string_at(0)))


def exception():
    def fail():
        raise RuntimeError("injected failure on the last rank before all_reduce #11")

    fail_after_10(fail)


def exit_early():
    fail_after_10(lambda: (say("sys.exit(0) before all_reduce #11"), sys.exit(0)))


def mismatch(at_sixth):
    """Collectives 1-5 and 7-10 are 1,024-element all_reduces; #6 is at_sixth(x)."""
    init()
    for i in range(10):
        x = ones(1024)
        if i == 5:
            at_sixth(x)
        else:
            dist.all_reduce(x)
        sync()
    finish()


def count_mismatch():
    def sixth(x):
        y = ones(4096) if RANK == LAST else x
        say(f"all_reduce #6 of {y.numel()} elements")
        dist.all_reduce(y)

    mismatch(sixth)


def op_mismatch():
    def sixth(x):
        if RANK == LAST:
            say("broadcast as collective #6")
            dist.broadcast(x, src=0)
        else:
            dist.all_reduce(x)

    mismatch(sixth)


def p2p_size_mismatch():
    init()
    all_reduce_loop(5)
    if RANK == 0:
        say("send 4096 floats to rank 1")
        dist.send(ones(4096), 1)
    elif RANK == 1:
        say("recv 1024 floats from rank 0")
        dist.recv(torch.empty(1024, device=DEVICE), 0)
    sync()
    all_reduce_loop(5)
    finish()


def oom_before_init():
    torch.cuda.set_device(0)
    held, chunk = [], 1 << 30
    while chunk >= 1 << 20:
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device=DEVICE))
        except torch.OutOfMemoryError:
            chunk //= 2
    say(f"holding {sum(t.numel() for t in held) >> 20} MiB of GPU memory")
    init()
    all_reduce_loop(2)
    finish()


def ipc_open_failed():
    init()
    all_reduce_loop(1)
    import cupy

    say("opening a garbage CUDA IPC handle")
    cupy.cuda.runtime.ipcOpenMemHandle(bytes(64))  # raises: the application's own error
    finish()


def bench():
    """Rank 0 reads `KIND N` lines (ar8, ar64m, ddp; `quit`), hands each to the other ranks
    through the rendezvous store (a CPU wait: idle ranks put no load on the GPU while another
    configuration measures), runs N operations on every rank and prints `RESULT KIND N seconds`."""
    init()
    store = dist.distributed_c10d._get_default_store()
    small, large = ones(2), ones(16 << 20)  # 8 B and 64 MiB of float32
    model = torch.nn.Sequential(
        *[m for _ in range(4) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
    ).to(DEVICE)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=None if ON_CPU else [0])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    batch = torch.randn(64, 1024, device=DEVICE)

    def step():
        loss = ddp(batch).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    work = {"ar8": lambda: dist.all_reduce(small), "ar64m": lambda: dist.all_reduce(large), "ddp": step}
    say("BENCH READY")
    for i in range(1_000_000):
        if RANK == 0:
            line = sys.stdin.readline().strip() or "quit"
            store.set(f"cmd{i}", line)
        else:
            line = store.get(f"cmd{i}").decode()
        if line == "quit":
            break
        kind, n = line.split()
        fn = work[kind]
        dist.all_reduce(small)  # lines the ranks up before the clock starts
        sync()
        t = time.perf_counter()
        for _ in range(int(n)):
            fn()
        issued = time.perf_counter() - t  # the host's share: what an interposer adds shows here
        sync()
        elapsed = time.perf_counter() - t
        if RANK == 0:
            print(f"RESULT {kind} {n} {elapsed:.9f} {issued:.9f}", flush=True)
    finish()


SCENARIOS = {
    "healthy": healthy,
    "short-loop": short_loop,
    "tight-loop": tight_loop,
    "laggard": laggard,
    "crash-sigkill": crash_sigkill,
    "crash-segv": crash_segv,
    "exception": exception,
    "exit-early": exit_early,
    "count-mismatch": count_mismatch,
    "op-mismatch": op_mismatch,
    "p2p-size-mismatch": p2p_size_mismatch,
    "oom-before-init": oom_before_init,
    "ipc-open-failed": ipc_open_failed,
    "bench": bench,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        sys.exit(f"usage: jobs.py {{{','.join(SCENARIOS)}}}")
    SCENARIOS[sys.argv[1]]()
