#!/usr/bin/env python3
"""PyTorch FSDP2 (torch.distributed.fsdp.fully_shard) on the CPU over gloo, against
dpbench --mode=fsdp: the same models, spawned ranks with one thread each.

Timing: GPT-2 (gpt2_reference.py's nanoGPT-style model; --model gpt2-tiny or gpt2) or
the MLP (train_step.py's), each transformer block or linear layer its own
fully_shard unit and the root the rest, AdamW (lr 1e-3), random tokens or inputs,
`--batch` samples per rank. Step time = the slowest rank's median over the timed steps;
throughput = ranks x batch / step time.

    PY="$(benchmarks/pytorch_reference/venv.sh)"
    "$PY" benchmarks/pytorch_reference/fsdp.py --model gpt2-tiny --batch 4 --seq 256 --ranks 2

Reference (--reference OUT): starts from the weights and batch of
tests/data/gpt2/gpt2_tiny_pytorch.safetensors (gpt2_reference.py's), shards the model
over --ranks ranks (rank r takes rows r*B/N .. (r+1)*B/N of the batch), takes five
AdamW steps (gpt2_reference.py's: lr 1e-3, weight decay 0.1 on the linear weights) and
writes each step's loss (the mean over the ranks) as loss.<k> and the full parameters
after them as after.<name>; tests/parallel/fsdp_pytorch_test.cpp checks dpbench's
sharded training against it.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp import parallel_main, save_reference, timed_median  # noqa: E402
from gpt2_reference import GPT  # noqa: E402
from gpt2_train_step import CONFIGS  # noqa: E402
from train_step import MODELS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests/data/gpt2/gpt2_tiny_pytorch.safetensors")


def shard(model, gpt):
    """Each block (GPT-2) or linear layer (MLP) one unit, then the root."""
    units = model.transformer.h if gpt else [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for m in units:
        fully_shard(m)
    fully_shard(model)


def timing_model(a):
    """The timed model (a GPT-2 configuration or the MLP) in training mode and a random batch
    of a.batch (x a.seq tokens): (model, inputs, targets, whether it is a GPT)."""
    gpt = a.model != "mlp"
    if gpt:
        c = dict(CONFIGS[a.model])
        return (GPT(c).train(), torch.randint(0, c["vocab_size"], (a.batch, a.seq)),
                torch.randint(0, c["vocab_size"], (a.batch, a.seq)), True)
    cls, shape = MODELS["mlp"]
    return cls().train(), torch.randn(a.batch, *shape), torch.randint(0, 10, (a.batch,)), False


def fixture_model():
    """gpt2-tiny with tests/data/gpt2/gpt2_tiny_pytorch.safetensors' initial weights, and
    its batch (tokens, targets)."""
    from safetensors.torch import load_file
    f = load_file(FIXTURE)
    model = GPT(dict(CONFIGS["gpt2-tiny"]))
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(f["init." + n])
    return model, f["tokens"].long(), f["targets"].long()


def adamw(model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and ".wte." not in n and ".wpe." not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and ".wte." not in n and ".wpe." not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.999), eps=1e-8)


def timing_worker(rank, a, port, queue):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    model, x, y, gpt = timing_model(a)
    if a.ranks > 1:
        shard(model, gpt)
    opt = adamw(model) if gpt else torch.optim.AdamW(model.parameters(), lr=1e-3)
    def step():
        loss = model(x, y) if gpt else F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    med = timed_median(step, a.warmup, a.steps, a.ranks)
    if a.ranks > 1:
        dist.destroy_process_group()
    if rank == 0:
        queue.put(med)


def reference_worker(rank, a, port, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    model, tokens, targets = fixture_model()
    rows = tokens.shape[0] // a.ranks
    mine = slice(rank * rows, (rank + 1) * rows)
    shard(model, True)
    opt = adamw(model)
    losses = []
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        loss = model(tokens[mine], targets[mine])
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        losses.append(float(mean.item()) / a.ranks)
    after = {n: p.full_tensor().detach().clone().contiguous() for n, p in model.named_parameters()}
    dist.destroy_process_group()
    if rank == 0:
        save_reference(a.reference, after, losses, a.ranks,
                       wrapping="fully_shard on each block, then the root")
        queue.put(losses)


def main():
    parallel_main(__doc__, CONFIGS, timing_worker, reference_worker, "fsdp2", default_batch=4,
                  shared_batch=False)


if __name__ == "__main__":
    main()
