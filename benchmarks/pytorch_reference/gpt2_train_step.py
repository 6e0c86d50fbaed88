#!/usr/bin/env python3
"""PyTorch's side of the GPT-2 CPU speed comparison (benchmarks/pytorch_reference/compare_gpt2.sh):
the nanoGPT-style model of gpt2_reference.py, trained with AdamW on random tokens, fp32,
eager, one process with --threads threads. Prints JSON: samples/s and tokens/s (median
step time over the measured steps).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import GPT  # noqa: E402

CONFIGS = {
    "gpt2-tiny": dict(n_layer=2, n_head=4, n_embd=64, block_size=256, vocab_size=512),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=sorted(CONFIGS), default="gpt2-tiny")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = CONFIGS[a.model]
    model = GPT(c)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, c["vocab_size"], (a.batch, a.seq))
    y = torch.randint(0, c["vocab_size"], (a.batch, a.seq))
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(x, y).backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    print(json.dumps({"model": a.model, "batch": a.batch, "seq": a.seq, "threads": a.threads, "step_s": step,
                      "samples_per_s": a.batch / step, "tokens_per_s": a.batch * a.seq / step,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
