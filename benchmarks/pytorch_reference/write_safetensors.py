#!/usr/bin/env python3
"""Write a LeNet state_dict as PyTorch and Hugging Face's safetensors library write it: a
real safetensors file from another tool, for the test that feeds every real input file
through dpbench's readers (tests/inputs/real_inputs_test.cpp).

    PY="$(benchmarks/pytorch_reference/venv.sh)"; "$PY" -m pip install safetensors
    "$PY" benchmarks/pytorch_reference/write_safetensors.py tests/data/safetensors/lenet_pytorch.safetensors
"""
import argparse
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step import LeNet  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = LeNet()
    # As transformers and timm write them: contiguous tensors and a "format" entry.
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, a.out, metadata={"format": "pt"})
    print(f"{a.out}: {len(model.state_dict())} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
