#!/usr/bin/env python3
"""PyTorch tensor parallelism (torch.distributed.tensor.parallel) on the CPU over gloo,
against dpbench --mode=tp: the same models, spawned ranks with one thread each, every
rank training on the whole batch.

The plan, as Megatron-LM's and dpbench's:
  - GPT-2 (gpt2_reference.py's nanoGPT-style model): in each block attn.c_attn and
    mlp.c_fc ColwiseParallel, attn.c_proj and mlp.c_proj RowwiseParallel; the token
    embedding RowwiseParallel (vocabulary-parallel) and the tied lm_head ColwiseParallel
    with its logits left sharded for loss_parallel() (the vocabulary-parallel
    cross-entropy). The fused query/key/value weight is laid out per rank before it is
    cut ([q_r; k_r; v_r] for each rank r), so each rank's contiguous rows are its heads'
    query, key and value and the cut model is the same function as the whole one.
  - The MLP (train_step.py's): fc1 ColwiseParallel, fc2 RowwiseParallel, fc3 whole.

Timing: AdamW (lr 1e-3), random tokens or inputs, `--batch` samples (every rank the
same). Step time = the slowest rank's median over the timed steps; throughput = batch /
step time.

    PY="$(benchmarks/pytorch_reference/venv.sh)"
    "$PY" benchmarks/pytorch_reference/tp.py --model gpt2-tiny --batch 8 --seq 256 --ranks 2

Reference (--reference OUT): starts from the weights and batch of
tests/data/gpt2/gpt2_tiny_pytorch.safetensors (gpt2_reference.py's), cuts the model over
--ranks ranks, takes five AdamW steps (gpt2_reference.py's: lr 1e-3, weight decay 0.1 on
the linear weights) on the whole batch and writes each step's loss as loss.<k> and the
whole parameters after them (the fused query/key/value rows back in their order) as
after.<name>; tests/models/gpt2_tp_pytorch_test.cpp checks dpbench's tensor-parallel
training against it.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, loss_parallel,
                                               parallelize_module)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp import parallel_main, save_reference, timed_median  # noqa: E402
from fsdp import adamw, fixture_model, timing_model  # noqa: E402
from gpt2_train_step import CONFIGS  # noqa: E402



def qkv_by_rank(t, ranks, inverse=False):
    """c_attn's rows [q; k; v] laid out as [q_0; k_0; v_0; q_1; ...] (or back)."""
    C = t.shape[0] // 3
    part = C // ranks
    if not inverse:
        return torch.cat([t[b * C + r * part: b * C + (r + 1) * part] for r in range(ranks) for b in range(3)])
    out = torch.empty_like(t)
    for r in range(ranks):
        for b in range(3):
            out[b * C + r * part: b * C + (r + 1) * part] = t[(r * 3 + b) * part: (r * 3 + b + 1) * part]
    return out


def attention_forward(self, x):
    """The block's attention on this rank's heads: c_attn gives (B, T, 3C/W) = q, k, v."""
    B, T, _ = x.shape
    q, k, v = self.c_attn(x).chunk(3, dim=2)
    heads = q.shape[-1] * self.n_head // x.shape[-1]
    q, k, v = (t.reshape(B, T, heads, -1).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


def cut_gpt(model, mesh, ranks):
    with torch.no_grad():
        for block in model.transformer.h:
            a = block.attn.c_attn
            a.weight.copy_(qkv_by_rank(a.weight, ranks))
            a.bias.copy_(qkv_by_rank(a.bias, ranks))
    for block in model.transformer.h:
        block.attn.forward = attention_forward.__get__(block.attn)
        parallelize_module(block, mesh, {"attn.c_attn": ColwiseParallel(), "attn.c_proj": RowwiseParallel(),
                                         "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()})
    parallelize_module(model, mesh, {
        "transformer.wte": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    model.lm_head.weight = model.transformer.wte.weight  # tied again, both cut by vocabulary rows


def gpt_loss(model, idx, targets):
    T = idx.shape[1]
    x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(T))
    for block in model.transformer.h:
        x = block(x)
    logits = model.lm_head(model.transformer.ln_f(x))
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def setup(rank, a):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=a.ranks)
    return init_device_mesh("cpu", (a.ranks,))


def timing_worker(rank, a, port, queue):
    a.port = port
    mesh = setup(rank, a) if a.ranks > 1 else None
    torch.manual_seed(0)
    model, x, y, gpt = timing_model(a)
    if mesh is not None:
        if gpt:
            cut_gpt(model, mesh, a.ranks)
        else:
            parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    opt = adamw(model) if gpt else torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        if gpt and mesh is not None:
            with loss_parallel():
                loss = gpt_loss(model, x, y)
                loss.backward()
        else:
            loss = model(x, y) if gpt else F.cross_entropy(model(x), y)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).detach())

    med = timed_median(step, a.warmup, a.steps, a.ranks)
    if mesh is not None:
        dist.destroy_process_group()
    if rank == 0:
        queue.put(med)


def reference_worker(rank, a, port, queue):
    a.port = port
    a.threads = 1
    mesh = setup(rank, a)
    model, tokens, targets = fixture_model()
    cut_gpt(model, mesh, a.ranks)
    opt = adamw(model)
    losses = []
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        with loss_parallel():
            loss = gpt_loss(model, tokens, targets)
            loss.backward()
        opt.step()
        losses.append(float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).detach()))
    after = {}
    for n, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        t = t.detach().clone().contiguous()
        if "c_attn" in n:
            t = qkv_by_rank(t, a.ranks, inverse=True)
        after[n] = t
    dist.destroy_process_group()
    if rank == 0:
        save_reference(a.reference, after, losses, a.ranks,
                       plan="c_attn, c_fc ColwiseParallel; c_proj RowwiseParallel; wte RowwiseParallel; tied lm_head "
                            "ColwiseParallel with loss_parallel")
        queue.put(losses)


def main():
    parallel_main(__doc__, CONFIGS, timing_worker, reference_worker, "tp", default_batch=8,
                  shared_batch=True)


if __name__ == "__main__":
    main()
