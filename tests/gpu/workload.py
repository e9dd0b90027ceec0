"""NCCL workloads for the GPU suite (tests/gpu/run_all.sh): real NCCL through PyTorch (and CuPy for
point-to-point on one GPU), run under libncclshim.so and the profiler plugin by the caller.

usage: workload.py MODE [ARGS]
  loop N           all-reduce / all-gather / broadcast N times on a 1-rank communicator, plus
                   self send/recv through CuPy's NCCL when CuPy has it
  init             one all-reduce (communicator init), for failure modes driven by the environment
  rank R W PORT    rank R of a W-rank job on this one GPU (two ranks on one GPU: NCCL refuses)
  forever          a 1-rank all-reduce loop that only ends when killed
  latency BYTES N  median all-reduce latency in microseconds over N timed iterations
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def init(rank=0, world=1, port=None):
    port = port or int(os.environ.get("GPU_SUITE_PORT", "29511"))
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        device_id=torch.device("cuda", 0),
    )


def self_send_recv(n):
    try:
        import cupy
        from cupy.cuda import nccl
    except Exception as e:  # CuPy without NCCL: say so, the caller records it
        print(f"p2p skipped: {e}")
        return 0
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    src = cupy.arange(1024, dtype=cupy.float32)
    dst = cupy.zeros_like(src)
    stream = cupy.cuda.Stream.null.ptr
    for _ in range(n):
        nccl.groupStart()
        comm.send(src.data.ptr, src.size, nccl.NCCL_FLOAT32, 0, stream)
        comm.recv(dst.data.ptr, dst.size, nccl.NCCL_FLOAT32, 0, stream)
        nccl.groupEnd()
    cupy.cuda.Stream.null.synchronize()
    assert bool((dst == src).all())
    comm.destroy()
    return n


def main():
    mode = sys.argv[1]
    if mode == "loop":
        n = int(sys.argv[2])
        init()
        x = torch.ones(1 << 16, device="cuda")
        out = [torch.empty_like(x)]
        for _ in range(n):
            dist.all_reduce(x)
            dist.all_gather(out, x)
            dist.broadcast(x, 0)
        torch.cuda.synchronize()
        p2p = self_send_recv(n)
        print(f"collectives={3 * n} p2p_pairs={p2p}")
        dist.destroy_process_group()
    elif mode == "init":
        init()
        x = torch.ones(8, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.destroy_process_group()
    elif mode == "rank":
        rank, world, port = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        init(rank, world, port)
        x = torch.ones(8, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.destroy_process_group()
    elif mode == "forever":
        init()
        x = torch.ones(1 << 10, device="cuda")
        print("RUNNING", flush=True)
        while True:
            dist.all_reduce(x)
            torch.cuda.synchronize()
    elif mode == "latency":
        nbytes, n = int(sys.argv[2]), int(sys.argv[3])
        init()
        x = torch.ones(max(1, nbytes // 4), device="cuda")
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            dist.all_reduce(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e6)
        print(f"latency_us={statistics.median(times):.3f}")
        dist.destroy_process_group()
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
