#!/usr/bin/env python3
"""What FSDP saves per rank, dpbench against PyTorch FSDP2 on the same machine: the
resident peak of each rank's process (VmHWM: everything the process held at once,
model construction and allocator caches included) for one device and for --ranks
sharded ranks, and dpbench's allocator figures beside it. Runs alternate (dpbench
single, dpbench fsdp, PyTorch single, FSDP2), --repeat times; medians.

    PY="$(benchmarks/pytorch_reference/venv.sh)"
    "$PY" benchmarks/pytorch_reference/fsdp_memory.py [--model gpt2] [--batch 2] [--seq 64] \\
        [--ranks 2] [--repeat 3] [--json OUT]

PyTorch: fsdp.py's model (gpt2_reference.py's nanoGPT GPT), each block a fully_shard unit
and then the root, AdamW, one thread per rank, gloo; --steps training steps after one
warm-up. dpbench: `--mode=single` and `--mode=fsdp --gpus=N` with the same model, batch
per rank, sequence length and optimizer; its report's devices[].peak_rss_bytes,
peak_memory_bytes (allocator) and runs[].fsdp.ranks[].activation_bytes.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20


def torch_worker(rank, a, port, queue):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp import adamw, shard
    from gpt2_reference import GPT
    from gpt2_train_step import CONFIGS
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if a.ranks_now > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks_now)
    c = dict(CONFIGS[a.model])
    model = GPT(c).train()
    x = torch.randint(0, c["vocab_size"], (a.batch, a.seq))
    y = torch.randint(0, c["vocab_size"], (a.batch, a.seq))
    if a.ranks_now > 1:
        shard(model, True)
    opt = adamw(model)
    for _ in range(1 + a.steps):
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
    if a.ranks_now > 1:
        dist.barrier()
        dist.destroy_process_group()
    queue.put((rank, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


def torch_run(a, ranks):
    import multiprocessing as mp
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a.ranks_now = ranks
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=torch_worker, args=(r, a, port, queue)) for r in range(ranks)]
    for p in procs:
        p.start()
    got = {}
    while len(got) < len(procs):
        try:
            rank, rss = queue.get(timeout=5)
            got[rank] = rss
        except Exception:  # queue.Empty: a rank that died never reports
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.kill()
                raise SystemExit(f"fsdp_memory: a PyTorch rank exited with {dead[0]}")
    for p in procs:
        p.join()
    return {"rss": [got[r] for r in range(ranks)]}


def dpbench_run(a, ranks):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        mode = ["--mode=single"] if ranks == 1 else ["--mode=fsdp", f"--gpus={ranks}"]
        cmd = [a.dpbench, *mode, f"--model={a.model}", "--data=synthetic", f"--seq={a.seq}", f"--batch={a.batch}",
               f"--steps={a.steps}", "--warmup=1", "--optimizer=adamw", "--threads=1", f"--json={out}"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"fsdp_memory: {' '.join(cmd)} failed: {p.stderr.strip()[-400:]}")
        run = json.load(open(out))["runs"][0]
    r = {"rss": [dv["peak_rss_bytes"] for dv in run["devices"]],
         "allocator": [dv["peak_memory_bytes"] for dv in run["devices"]],
         "cached": [dv["cached_memory_bytes"] for dv in run["devices"]]}
    if "fsdp" in run:
        r["activation"] = [x["activation_bytes"] for x in run["fsdp"]["ranks"]]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--batch", type=int, default=2, help="sequences per rank")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dpbench", default=os.path.join(ROOT, "build/benchmarks/dpbench/dpbench"))
    ap.add_argument("--json")
    a = ap.parse_args()
    runs = {k: [] for k in ("dpbench single", "dpbench fsdp", "PyTorch single", "FSDP2")}
    for i in range(a.repeat):
        runs["dpbench single"].append(dpbench_run(a, 1))
        runs["dpbench fsdp"].append(dpbench_run(a, a.ranks))
        runs["PyTorch single"].append(torch_run(a, 1))
        runs["FSDP2"].append(torch_run(a, a.ranks))
        print(f"repeat {i + 1}/{a.repeat} done", file=sys.stderr)

    def med(name, key):  # the median over repeats of the largest rank's figure
        vals = [max(r[key]) for r in runs[name] if key in r and None not in r[key]]
        return statistics.median(vals) if vals else None

    print(f"{a.model}, {a.batch} x {a.seq} tokens per rank, AdamW, {a.ranks} ranks, medians of {a.repeat}")
    print(f"{'':<16} {'peak RSS MiB':>13} {'x single':>9} {'allocator MiB':>14} {'x single':>9} {'activations MiB':>16}")
    for tool, single, sharded in (("dpbench", "dpbench single", "dpbench fsdp"), ("PyTorch", "PyTorch single", "FSDP2")):
        for name in (single, sharded):
            rss, alloc, act = med(name, "rss"), med(name, "allocator"), med(name, "activation")
            rel = rss / med(single, "rss")
            ra = "" if alloc is None else f"{alloc / MIB:14.1f} {alloc / med(single, 'allocator'):9.3f}"
            print(f"{name:<16} {rss / MIB:13.1f} {rel:9.3f} {ra:>24} {'' if act is None else f'{act / MIB:16.1f}'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "batch_per_rank": a.batch, "seq": a.seq, "ranks": a.ranks, "steps": a.steps,
                       "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
