#!/usr/bin/env python3
"""GPT-2 in PyTorch as nanoGPT writes it, against dpbench's gpt2 models: the same weights
and the same batch give the same loss and gradients, and five AdamW steps later the
same parameters.

Builds the model (nanoGPT's structure and parameter names: transformer.wte, .wpe,
.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, .ln_f, lm_head tied
to wte), takes a batch of byte-level tokens of a real text (the first windows of
nanoGPT-style 90 % training split, as dpbench's --data=text:PATH cuts them), and writes
one safetensors file that tests/models/gpt2_pytorch_test.cpp checks dpbench against:

  init.<name>   the weights both start from (the tied head stored once, as wte)
  grad.<name>   d loss / d weight for the batch (wte's holds the head's part too)
  after.<name>  the weights after 5 AdamW steps on that batch (lr 1e-3, betas 0.9/0.999,
                eps 1e-8, weight decay 0.1 on the linear layers' weight matrices only)
  tokens, targets (i32, B x T), loss (f32, 1)

    PY="$(benchmarks/pytorch_reference/venv.sh)"; "$PY" -m pip install safetensors
    "$PY" benchmarks/pytorch_reference/gpt2_reference.py tests/data/gpt2/gpt2_tiny_pytorch.safetensors
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

# gpt2-tiny in dpbench's registry
CONFIG = dict(n_layer=2, n_head=4, n_embd=64, block_size=256, vocab_size=512)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])
        self.n_head = c["n_head"]

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and ".ln_" not in name and "ln_f" not in name:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model = GPT(CONFIG)
    names = [n for n, _ in model.named_parameters()]  # the tied weight once, as transformer.wte.weight
    init = {n: p.detach().clone() for n, p in model.named_parameters()}

    data = open(a.text, "rb").read()
    train = data[: len(data) * 9 // 10]
    windows = [train[i * a.seq: i * a.seq + a.seq + 1] for i in range(a.batch)]
    tokens = torch.tensor([list(w[:-1]) for w in windows], dtype=torch.int64)
    targets = torch.tensor([list(w[1:]) for w in windows], dtype=torch.int64)

    loss = model(tokens, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    # Weight decay on the linear layers' weight matrices; not on biases, norms or the
    # embedding tables (wte is also the head's weight: not decayed).
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and ".wte." not in n and ".wpe." not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and ".wte." not in n and ".wpe." not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        model(tokens, targets).backward()
        opt.step()

    out = {}
    for n in names:
        out["init." + n] = init[n].contiguous()
        out["grad." + n] = grads[n].contiguous()
        out["after." + n] = dict(model.named_parameters())[n].detach().clone().contiguous()
    out["tokens"] = tokens.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    out["loss"] = loss.detach().reshape(1)
    meta = {"format": "pt", "torch": torch.__version__, "model": "gpt2-tiny", "config": str(CONFIG),
            "text": a.text, "batch": str(a.batch), "seq": str(a.seq), "steps": str(a.steps),
            "optimizer": "AdamW lr=1e-3 betas=(0.9,0.999) eps=1e-8 weight_decay=0.1 on linear weights"}
    save_file(out, a.out, metadata=meta)
    print(f"{a.out}: loss {loss.item():.6f}, {len(names)} parameters, torch {torch.__version__}")


if __name__ == "__main__":
    main()
