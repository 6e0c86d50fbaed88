#!/usr/bin/env python3
"""PyTorch reference for dpbench --bench=collectives: torch.distributed collectives on
the gloo (CPU) or nccl (GPU) backend, timed the way dpbench times them (warm-up, then
timed iterations each waited for; time = the slowest rank's mean; algbw = size / time,
busbw = algbw x F as nccl-tests).

    python3 benchmarks/pytorch_reference/collectives.py --ranks 2 -b 1K -e 64M -f 4 --json out.json

Use Debian's python3-torch (/usr/bin/python3) on the CPU.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp import run_ranks  # noqa: E402


def parse_bytes(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * scale[text[-1].upper()] if text[-1].upper() in scale else int(text)


def bus_factor(op, n):
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def worker(rank, a, port, queue):
    torch.set_num_threads(a.threads)
    dist.init_process_group(a.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    dev = torch.device("cuda", rank) if a.backend == "nccl" else torch.device("cpu")
    n = a.ranks
    rows = []
    for op in a.ops.split(","):
        size = parse_bytes(a.min_bytes)
        while size <= parse_bytes(a.max_bytes):
            total = max(1, size // 4)
            if op == "allgather":
                count = max(1, total // n)
                x = torch.full((count,), float(rank + 1), device=dev)
                outs = [torch.empty_like(x) for _ in range(n)]
                call = lambda: dist.all_gather(outs, x)
                nbytes = count * n * 4
            elif op == "reduce_scatter":
                count = max(1, total // n)
                ins = [torch.full((count,), float(rank + 1), device=dev) for _ in range(n)]
                out = torch.empty(count, device=dev)
                call = lambda: dist.reduce_scatter(out, ins)
                nbytes = count * n * 4
            elif op == "broadcast":
                x = torch.full((total,), float(rank + 1), device=dev)
                call = lambda: dist.broadcast(x, 0)
                nbytes = total * 4
            else:
                x = torch.full((total,), float(rank + 1), device=dev)
                call = lambda: dist.all_reduce(x)
                nbytes = total * 4
            for _ in range(a.warmup):
                call()
            dist.barrier()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.iters):
                call()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t = torch.tensor([(time.perf_counter() - t0) / a.iters], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            seconds = float(t.item())
            algbw = nbytes / seconds / 1e9
            rows.append({"op": op, "bytes": nbytes, "time_us": seconds * 1e6, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * bus_factor(op, n)})
            size *= a.factor
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--ops", default="allreduce")
    ap.add_argument("-b", "--min-bytes", default="1K")
    ap.add_argument("-e", "--max-bytes", default="64M")
    ap.add_argument("-f", "--factor", type=int, default=4)
    ap.add_argument("-w", "--warmup", type=int, default=3)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = run_ranks(worker, a, a.ranks)
    print(f"torch {torch.__version__} {a.backend}, {a.ranks} ranks")
    print(f"{'# op':<15} {'size (B)':>12} {'time (us)':>12} {'algbw (GB/s)':>12} {'busbw (GB/s)':>12}")
    for r in rows:
        print(f"{r['op']:<15} {r['bytes']:>12} {r['time_us']:>12.1f} {r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": f"torch {torch.__version__}", "backend": a.backend, "ranks": a.ranks,
                       "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
