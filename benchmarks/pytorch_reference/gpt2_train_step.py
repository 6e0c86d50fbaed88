#!/usr/bin/env python3
"""PyTorch's side of the GPT-2 speed comparison (benchmarks/pytorch_reference/compare_gpt2.sh):
the nanoGPT-style model of gpt2_reference.py, trained with AdamW on random tokens, one
process: on the CPU with --threads threads in fp32; on CUDA in fp32, tf32 or bf16
(autocast, as nanoGPT trains), eager or torch.compile. Prints JSON: samples/s, tokens/s
(median step time over the measured steps) and the training FLOPs per token (6N + 12LCT,
the count dpbench reports).
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    c = CONFIGS[a.model]
    model = GPT(c).to(a.device)
    n_params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    flops_per_token = 6 * n_params + 12 * c["n_layer"] * c["n_embd"] * a.seq
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=a.device == "cuda")
    step_fn = torch.compile(model) if a.compile else model
    x = torch.randint(0, c["vocab_size"], (a.batch, a.seq), device=a.device)
    y = torch.randint(0, c["vocab_size"], (a.batch, a.seq), device=a.device)
    autocast = torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = step_fn(x, y)
        loss.backward()
        opt.step()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    print(json.dumps({"model": a.model, "batch": a.batch, "seq": a.seq, "threads": a.threads, "device": a.device,
                      "precision": a.precision, "compile": a.compile, "step_s": step,
                      "samples_per_s": a.batch / step, "tokens_per_s": a.batch * a.seq / step,
                      "flops_per_token": flops_per_token, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
