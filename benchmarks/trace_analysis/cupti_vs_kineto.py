#!/usr/bin/env python3
"""dpbench's CUPTI collector against torch.profiler's (Kineto, CUPTI too, collected and
analysed by other code) on the same workload: a PyTorch ResNet-18 training step on one
GPU. Our collector is loaded into this process (libdpb_cupti_probe.so, through ctypes)
and times some steps; torch.profiler then times as many of the same steps. Each side's
window runs from before the first launch to after the device has finished (a
synchronize), and over it:
  busy     the union of kernels, copies and sets over the window (HTA's definition);
  kernels  kernels per step;
  kernel   the kernels' summed time per step.
Targets: busy and kernel time within 2 %, the same kernels per step.

  cupti_vs_kineto.py --probe build/benchmarks/libdpb_cupti_probe.so [--batch 128]
Prints one line per figure (pass/FAIL) and exits 1 when one fails.
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch_reference"))
from train_step import ResNet18  # noqa: E402


def kineto_figures(path, steps):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    window = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == "dpb window"]
    if len(window) != 1:
        raise SystemExit(f"the trace holds {len(window)} 'dpb window' annotations, not one")
    lo, hi = window[0]["ts"], window[0]["ts"] + window[0]["dur"]
    spans, kernels, kernel_us = [], 0, 0.0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        b, d = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
        if d <= b:
            continue
        spans.append((b, d))
        if e["cat"] == "kernel" and e["ts"] >= lo and e["ts"] + e["dur"] <= hi:
            kernels += 1
            kernel_us += e["dur"]
    spans.sort()
    busy, end = 0.0, lo
    for b, d in spans:
        if d > end:
            busy += d - max(b, end)
            end = d
    return busy / (hi - lo), kernels / steps, kernel_us * 1e-6 / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--probe", required=True, help="libdpb_cupti_probe.so")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    a = p.parse_args()

    dev = torch.device("cuda")
    model = ResNet18().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()

    lib = ctypes.CDLL(a.probe)
    lib.dpb_probe_start.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.dpb_probe_stop.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int] + [
        ctypes.POINTER(ctypes.c_double)] * 3 + [ctypes.c_char_p, ctypes.c_int]
    why = ctypes.create_string_buffer(2048)
    if lib.dpb_probe_start(why, len(why)) != 0:
        print(f"- [FAIL] CUPTI against torch.profiler: our collector could not subscribe: {why.value.decode()}")
        return 1
    lo = time.monotonic_ns()  # CLOCK_MONOTONIC: std::chrono::steady_clock's
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    hi = time.monotonic_ns()
    busy, kps, ks = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
    if lib.dpb_probe_stop(lo, hi, a.steps, ctypes.byref(busy), ctypes.byref(kps), ctypes.byref(ks), why,
                          len(why)) != 0:
        print(f"- [FAIL] CUPTI against torch.profiler: reading our collector failed: {why.value.decode()}")
        return 1
    ours = (busy.value, kps.value, ks.value / a.steps)

    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with tempfile.TemporaryDirectory() as d:
        with torch.profiler.profile(activities=acts) as prof:
            with torch.profiler.record_function("dpb window"):
                for _ in range(a.steps):
                    step()
                torch.cuda.synchronize()
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        theirs = kineto_figures(path, a.steps)

    failed = False
    for name, o, t, tol in (("busy share", ours[0], theirs[0], 0.02), ("kernels per step", ours[1], theirs[1], 0.0),
                            ("kernel time per step (s)", ours[2], theirs[2], 0.02)):
        ok = abs(o - t) <= tol * abs(t) + 1e-12
        failed |= not ok
        print(f"- [{'pass' if ok else 'FAIL'}] CUPTI against torch.profiler, ResNet-18 b{a.batch} ({a.steps} steps), "
              f"{name}: dpbench {o:.6g}, torch.profiler {t:.6g} ({(o / t - 1) if t else 0:+.2%}; target {tol:.0%})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
