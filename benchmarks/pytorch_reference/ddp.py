#!/usr/bin/env python3
"""PyTorch reference for dpbench --mode=ddp on the CPU: DistributedDataParallel on the
gloo backend with N spawned ranks (or the plain model with --ranks 1, as dpbench's
single mode), the same models as train_step.py, SGD (lr 0.01, momentum 0.9), random
data, `--batch` samples per rank. Step time = the slowest rank's median over the timed
steps; throughput = ranks x batch / step time.

    python3 benchmarks/pytorch_reference/ddp.py --model resnet18 --batch 16 --ranks 2 --threads 1

Use Debian's python3-torch (/usr/bin/python3): it is built on the same oneDNN.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step import MODELS  # noqa: E402  (same layers and shapes as dpbench's registry)


def timed_median(step, warmup, steps, ranks):
    """Calls step() warmup + steps times; the median seconds of the timed calls, the slowest
    rank's when there are several (a collective every rank makes)."""
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    if ranks > 1:
        t = torch.tensor([med])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        med = float(t.item())
    return med


def run_ranks(worker, a, ranks):
    """Spawns `ranks` processes running worker(rank, a, port, queue), with a free local port
    for their process group; returns what the first of them put on the queue."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, port, queue)) for r in range(ranks)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    return result


def worker(rank, a, port, queue):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cls, shape = MODELS[a.model]
    model = cls().train()
    if a.ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, *shape)
    y = torch.randint(0, 10, (a.batch,))
    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    med = timed_median(step, a.warmup, a.steps, a.ranks)
    if a.ranks > 1:
        dist.destroy_process_group()
    if rank == 0:
        queue.put(med)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="lenet")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--json")
    a = ap.parse_args()
    med = run_ranks(worker, a, a.ranks)
    result = {"framework": f"pytorch {torch.__version__}", "model": a.model, "batch_per_rank": a.batch,
              "ranks": a.ranks, "threads": a.threads, "step_time_median_s": med,
              "samples_per_s": a.ranks * a.batch / med}
    print(json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
