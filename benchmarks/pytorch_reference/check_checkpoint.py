#!/usr/bin/env python3
"""Load a dpbench LeNet checkpoint into PyTorch and evaluate it on Fashion-MNIST.

The checkpoint is read with safetensors.torch.load_file and loaded into the PyTorch
LeNet of train_step.py with load_state_dict(strict=True); the test accuracy and loss
PyTorch computes must equal the ones dpbench printed for the same weights.

    dpbench --model=lenet --dataset=fashion-mnist --epochs=1 --save=lenet.safetensors
    python3 benchmarks/pytorch_reference/check_checkpoint.py lenet.safetensors

Needs torch and safetensors (pip install safetensors).
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step import LeNet  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    tensors = load_file(a.checkpoint)
    model = LeNet()
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith("optimizer.")}, strict=True)
    model.eval()
    with gzip.open(os.path.join(a.data_dir, "t10k-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read()[16:], np.uint8).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    with gzip.open(os.path.join(a.data_dir, "t10k-labels-idx1-ubyte.gz")) as f:
        y = torch.from_numpy(np.frombuffer(f.read()[8:], np.uint8).astype(np.int64))
    x = torch.from_numpy((x - 0.2860) / 0.3530)
    with torch.no_grad():
        out = model(x)
    print(f"pytorch: test accuracy {100 * (out.argmax(1) == y).float().mean().item():.2f}%, "
          f"loss {F.cross_entropy(out, y).item():.4f} on {len(y)} samples")


if __name__ == "__main__":
    main()
