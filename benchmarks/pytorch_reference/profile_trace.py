#!/usr/bin/env python3
"""Profile a PyTorch training loop with torch.profiler and write its Kineto traces, for
`dpdoctor --torch-trace`: a healthy run, or one of the classic reasons devices idle.

    python3 benchmarks/pytorch_reference/profile_trace.py --case slow-loader --out traces/
    dpdoctor --torch-trace traces/

Cases (--device cuda unless noted):
  healthy       one device, batches prefetched by loader workers (also on the CPU)
  slow-loader   every batch takes --delay-ms to load, in the training process (also on the CPU)
  dp            torch.nn.DataParallel over every visible GPU
  dp-bypass     the DataParallel wrapper built, but its .module called: one GPU works
  naive-mp      the model's two halves on cuda:0 and cuda:1, the whole batch one half at a time
  ddp           DistributedDataParallel, one process per GPU (run under
                torchrun --nproc-per-node=N; each rank writes its own trace)

The traces are what tensorboard_trace_handler writes (one .pt.trace.json per process),
over --steps profiled steps after a warm-up.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """A small MLP whose two halves can sit on two devices (naive model parallelism)."""

    def __init__(self, width=2048, devices=None):
        super().__init__()
        self.devices = devices
        self.first = nn.Sequential(nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.second = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
        if devices:
            self.first.to(devices[0])
            self.second.to(devices[1])

    def forward(self, x):
        if self.devices:
            return self.second(self.first(x.to(self.devices[0])).to(self.devices[1]))
        return self.second(self.first(x))


class Data(torch.utils.data.Dataset):
    def __init__(self, n, delay_ms):
        self.n, self.delay = n, delay_ms / 1e3

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        return torch.randn(784, generator=g), i % 10


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", required=True,
                   choices=["healthy", "slow-loader", "dp", "dp-bypass", "naive-mp", "ddp"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--delay-ms", type=float, default=0.2, help="slow-loader: per-sample load time")
    p.add_argument("--out", default="traces")
    a = p.parse_args()

    if a.device == "cpu" and a.case not in ("healthy", "slow-loader"):
        p.error(f"--case={a.case} needs GPUs (--device cuda)")
    rank, world = 0, 1
    if a.case == "ddp":
        import torch.distributed as dist
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device(a.device, torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")

    if a.case == "naive-mp":
        model = Net(devices=["cuda:0", "cuda:1"])
        out_dev = torch.device("cuda:1")
    else:
        model = Net().to(dev)
        out_dev = dev
    run = model
    if a.case in ("dp", "dp-bypass"):
        wrapper = nn.DataParallel(model)
        run = wrapper if a.case == "dp" else wrapper.module  # the bypass: calling .module
    if a.case == "ddp":
        run = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    slow = a.case == "slow-loader"
    data = Data(a.batch * (a.steps + a.warmup + 1) * world, a.delay_ms if slow else 0)
    sampler = torch.utils.data.distributed.DistributedSampler(data) if a.case == "ddp" else None
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, sampler=sampler, num_workers=0 if slow else 2,
                                         pin_memory=a.device == "cuda", drop_last=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if a.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    os.makedirs(a.out, exist_ok=True)
    schedule = torch.profiler.schedule(wait=0, warmup=a.warmup, active=a.steps, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=schedule,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(
                                    a.out, worker_name=f"{a.case}_rank{rank}")) as prof:
        for step, (x, y) in enumerate(loader):
            if step >= a.warmup + a.steps:
                break
            x, y = x.to(dev, non_blocking=True), y.to(out_dev, non_blocking=True)
            loss = F.cross_entropy(run(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if a.device == "cuda":
                torch.cuda.synchronize()
            prof.step()
    print(f"traces in {a.out}/ (dpdoctor --torch-trace {a.out})")


if __name__ == "__main__":
    main()
