#!/usr/bin/env python3
"""Profile a PyTorch training loop with torch.profiler and write its Kineto traces, for
`dpdoctor --torch-trace`: a healthy run, or one of the classic reasons devices idle.

    python3 benchmarks/pytorch_reference/profile_trace.py --case slow-loader --out traces/
    dpdoctor --torch-trace traces/

Cases (--device cuda unless noted "also on the CPU"):
  healthy        one device, batches prefetched by loader workers (also on the CPU)
  slow-loader    every batch takes --delay-ms per sample to load, in the training process
                 (also on the CPU)
  launch-bound   a deep narrow MLP at a tiny batch: many short kernels, the host launching
  item-sync      .item() after every layer and on the loss: the host waits for the device
  pageable       large batches from unpinned memory, copied synchronously
  resnet50       torchvision ResNet-50, bf16 autocast, channels-last, batch 256: healthy
  dp             torch.nn.DataParallel over every visible GPU
  dp-device0     torch.nn.DataParallel(model, device_ids=[0]): one GPU of the visible set works
  dp-bypass      the DataParallel wrapper built, but its .module called: one GPU works
  naive-mp       the model's two halves on cuda:0 and cuda:1, the whole batch one half at a time
  ddp            DistributedDataParallel, one process per rank, under
                 torchrun --nproc-per-node=N (each rank writes its own trace). --backend gloo
                 runs on the CPU or lets several ranks share one GPU.
  fsdp           FSDP2's fully_shard on each linear layer and the root, under torchrun as
                 ddp (each rank its DistributedSampler shard)
  tp             tensor parallelism (torch.distributed.tensor.parallel): the MLP's linears
                 cut column/row-parallel in pairs, under torchrun as ddp, every rank on the
                 same batches

The traces are what tensorboard_trace_handler writes (one .pt.trace.json per process),
over --steps profiled steps after a warm-up.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

GPU_ONLY = {"launch-bound", "item-sync", "pageable", "resnet50", "dp", "dp-device0", "dp-bypass", "naive-mp"}


class Net(nn.Module):
    """An MLP whose two halves can sit on two devices (naive model parallelism)."""

    def __init__(self, width=2048, depth=2, inputs=784, devices=None, sync_every_layer=False):
        super().__init__()
        self.devices = devices
        self.sync = sync_every_layer
        half = [nn.Linear(inputs, width), nn.ReLU()]
        for _ in range(depth - 1):
            half += [nn.Linear(width, width), nn.ReLU()]
        self.first = nn.Sequential(*half)
        rest = []
        for _ in range(depth - 1):
            rest += [nn.Linear(width, width), nn.ReLU()]
        self.second = nn.Sequential(*rest, nn.Linear(width, 10))
        if devices:
            self.first.to(devices[0])
            self.second.to(devices[1])

    def forward(self, x):
        if self.sync:  # what "just print the activations' scale" does to a GPU
            for layer in list(self.first) + list(self.second):
                x = layer(x)
                _ = x.abs().mean().item()
            return x
        if self.devices:
            return self.second(self.first(x.to(self.devices[0])).to(self.devices[1]))
        return self.second(self.first(x))


class Data(torch.utils.data.Dataset):
    def __init__(self, n, shape, delay_ms, classes):
        self.n, self.shape, self.delay, self.classes = n, shape, delay_ms / 1e3, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        return torch.randn(*self.shape, generator=g), i % self.classes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", required=True,
                   choices=["healthy", "slow-loader", "launch-bound", "item-sync", "pageable", "resnet50",
                            "dp", "dp-device0", "dp-bypass", "naive-mp", "ddp", "fsdp", "tp"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--backend", default=None, choices=["nccl", "gloo"],
                   help="ddp: the process group's backend (default nccl on cuda, gloo on cpu)")
    p.add_argument("--batch", type=int, default=None, help="per process (default per case)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--delay-ms", type=float, default=0.2, help="slow-loader: per-sample load time")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave it)")
    p.add_argument("--out", default="traces")
    a = p.parse_args()

    if a.device == "cpu" and a.case in GPU_ONLY:
        p.error(f"--case={a.case} needs a GPU (--device cuda); on the CPU: healthy, slow-loader, ddp, fsdp, tp")
    if a.threads:
        torch.set_num_threads(a.threads)
    rank, world = 0, 1
    distributed = a.case in ("ddp", "fsdp", "tp")
    if distributed:
        import torch.distributed as dist
        backend = a.backend or ("nccl" if a.device == "cuda" else "gloo")
        dist.init_process_group(backend)
        rank, world = dist.get_rank(), dist.get_world_size()
        if a.device == "cuda":  # ranks beyond the GPUs share them (gloo)
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dev = torch.device(a.device, torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")

    batch = a.batch or {"launch-bound": 4, "pageable": 4096, "resnet50": 256, "dp-bypass": 256}.get(a.case, 256)
    shape, classes = (784,), 10
    out_dev = dev
    if a.case == "resnet50":
        import torchvision
        model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
        shape, classes = (3, 224, 224), 1000
    elif a.case == "naive-mp":
        model = Net(devices=["cuda:0", "cuda:1"])
        out_dev = torch.device("cuda:1")
    elif a.case == "launch-bound":
        model = Net(width=64, depth=12).to(dev)
    elif a.case == "pageable":
        shape = (8192,)
        model = Net(width=256, inputs=8192).to(dev)
    else:
        model = Net(sync_every_layer=a.case == "item-sync").to(dev)
    run = model
    if a.case in ("dp", "dp-bypass"):
        wrapper = nn.DataParallel(model)
        run = wrapper if a.case == "dp" else wrapper.module  # the bypass: calling .module
    if a.case == "dp-device0":
        run = nn.DataParallel(model, device_ids=[0])
    if a.case == "ddp":
        run = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if a.device == "cuda" else None)
    if a.case == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for m in model.modules():
            if isinstance(m, nn.Linear):
                fully_shard(m)
        fully_shard(model)
    if a.case == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh(dev.type, (world,))
        # first.0 (784 -> width) column-parallel, first.2 (width -> width) row-parallel; the rest whole
        parallelize_module(model, mesh, {"first.0": ColwiseParallel(), "first.2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    slow = a.case == "slow-loader"
    pinned = a.device == "cuda" and a.case != "pageable"
    data = Data(batch * (a.steps + a.warmup + 1) * world, shape, a.delay_ms if slow else 0, classes)
    sampler = torch.utils.data.distributed.DistributedSampler(data) if a.case in ("ddp", "fsdp") else None
    loader = torch.utils.data.DataLoader(data, batch_size=batch, sampler=sampler, num_workers=0 if slow else 2,
                                         pin_memory=pinned, drop_last=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if a.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    os.makedirs(a.out, exist_ok=True)
    schedule = torch.profiler.schedule(wait=0, warmup=a.warmup, active=a.steps, repeat=1)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if a.case == "resnet50" else None
    with torch.profiler.profile(activities=activities, schedule=schedule,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(
                                    a.out, worker_name=f"{a.case}_rank{rank}")) as prof:
        for step, (x, y) in enumerate(loader):
            if step >= a.warmup + a.steps:
                break
            x, y = x.to(dev, non_blocking=pinned), y.to(out_dev, non_blocking=pinned)
            if a.case == "resnet50":
                x = x.contiguous(memory_format=torch.channels_last)
                with autocast:
                    loss = F.cross_entropy(run(x), y)
            else:
                loss = F.cross_entropy(run(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if a.case == "item-sync":
                _ = loss.item()
            prof.step()
    if distributed:
        torch.distributed.destroy_process_group()
    print(f"traces in {a.out}/ (dpdoctor --torch-trace {a.out})")


if __name__ == "__main__":
    main()
