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


def save_reference(path, after, losses, ranks, **how):
    """A five-step reference file from the GPT-2 fixture's weights and batch, with AdamW:
    after.<name> (the whole parameters), loss.<k>, and what wrote it (`how`: the
    parallelism) in the metadata."""
    from safetensors.torch import save_file
    out = {"after." + n: t for n, t in after.items()}
    for k, v in enumerate(losses):
        out[f"loss.{k}"] = torch.tensor([v], dtype=torch.float32)
    meta = {"format": "pt", "torch": torch.__version__, "model": "gpt2-tiny", "ranks": str(ranks),
            "start": "tests/data/gpt2/gpt2_tiny_pytorch.safetensors (init.*, tokens, targets)", **how,
            "optimizer": "AdamW lr=1e-3 betas=(0.9,0.999) eps=1e-8 weight_decay=0.1 on linear weights",
            "steps": "5"}
    save_file(out, path, metadata=meta)


def parallel_main(doc, configs, timing_worker, reference_worker, mode, default_batch, shared_batch):
    """fsdp.py's and tp.py's command line: timing (`--batch` per rank, or every rank's when
    `shared_batch`) or the five-step reference (--reference OUT)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(configs) + ["mlp"], default="gpt2-tiny")
    ap.add_argument("--batch", type=int, default=default_batch,
                    help="samples (every rank the same)" if shared_batch else "samples per rank")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--reference", metavar="OUT", help="write the five-step reference (see above)")
    a = ap.parse_args()
    result = run_ranks(reference_worker if a.reference else timing_worker, a, a.ranks)
    if a.reference:
        print(f"{a.reference}: losses {', '.join(f'{v:.6f}' for v in result)}; torch {torch.__version__}")
        return
    med = result
    summary = {"framework": f"pytorch {torch.__version__}", "mode": mode if a.ranks > 1 else "single",
               "model": a.model, ("batch" if shared_batch else "batch_per_rank"): a.batch,
               "seq": a.seq if a.model != "mlp" else None, "ranks": a.ranks, "threads": a.threads,
               "step_time_median_s": med,
               "samples_per_s": (1 if shared_batch else a.ranks) * a.batch / med}
    print(json.dumps(summary))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f)


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
