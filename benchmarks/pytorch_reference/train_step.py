#!/usr/bin/env python3
"""PyTorch reference for dpbench's training step, on the CPU or a GPU.

Builds the same models as dpbench's registry (same layers, shapes and parameter
names), trains them with SGD (lr 0.01, momentum 0.9) on random data and reports
the median step time and samples/s, measured the way dpbench measures them
(warm-up excluded; one step = forward, loss, backward, optimizer step, zero_grad,
and on a GPU a synchronisation at the end of the step, as dpbench reads the loss).

    python3 benchmarks/pytorch_reference/train_step.py --model lenet --batch 64 --threads 1
    python3 benchmarks/pytorch_reference/train_step.py --device cuda --model resnet18 --batch 256 \
        --precision bf16 --channels-last [--compile]

CPU: use Debian's python3-torch (/usr/bin/python3): it is built on the same oneDNN.
GPU precisions: fp32 (TF32 off for matmuls and convolutions), tf32 (TF32 on for both),
bf16 (autocast to bfloat16 with fp32 weights, as dpbench's --precision=bf16).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self, channels=1, size=28, classes=10):
        super().__init__()
        pad = 2 if size == 28 else 0
        self.conv1 = nn.Conv2d(channels, 6, 5, padding=pad)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return F.relu(out, inplace=True)


class ResNet18(nn.Module):
    """torchvision's resnet18 with the CIFAR stem (3x3 conv, stride 1, no max-pool)."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for i, w in enumerate([64, 128, 256, 512]):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)), inplace=True)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {"mlp": (MLP, (1, 28, 28)), "lenet": (LeNet, (1, 28, 28)), "resnet18": (ResNet18, (3, 32, 32))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="lenet")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--channels-last", action="store_true", help="NHWC activations and weights (GPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--json", help="write {name, unit, value} results here")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    cls, shape = MODELS[a.model]
    model = cls().train().to(dev)
    fmt = torch.channels_last if a.channels_last and len(shape) == 3 else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step_model = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch, *shape, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(step_model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()  # dpbench reads every step's loss
        sync()
        t1 = time.perf_counter()
        if i >= a.warmup:
            times.append(t1 - t0)
    med = statistics.median(times)
    result = {
        "framework": f"pytorch {torch.__version__}",
        "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "model": a.model,
        "batch": a.batch,
        "threads": a.threads,
        "precision": a.precision,
        "channels_last": a.channels_last,
        "compile": a.compile,
        "step_time_median_s": med,
        "samples_per_s": a.batch / med,
        "last_loss": loss_value,
    }
    print(json.dumps(result))
    if a.json:
        tag = f"{a.device}/{a.precision}" + ("/nhwc" if a.channels_last else "") + ("/compile" if a.compile else "")
        with open(a.json, "w") as f:
            json.dump([{"name": f"pytorch/{a.model}/b{a.batch}/{tag}", "unit": "samples/s",
                        "value": result["samples_per_s"]}], f)


if __name__ == "__main__":
    main()
