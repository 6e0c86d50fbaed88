#!/usr/bin/env python3
"""Write Kineto traces shaped like a PyTorch DDP job's on GPUs, of any size, for timing
trace readers (bench_vs_hta.py) and checking analyses against HTA (hta_agreement.py).

Each rank's file holds, per step: a ProfilerStep annotation, a DataLoader wait, an
input copy, --kernels launches (cpu_op -> cudaLaunchKernel -> kernel, linked by
correlation ids, with Kineto's usual args), NCCL all-reduce kernels on their own stream
in the second half of the step (partly overlapping the backward), an optimizer tail and
host gaps of random length (the GPU idles), so every share of the breakdown is non-zero.

    make_kineto_trace.py --ranks 4 --steps 200 --kernels 400 --out /tmp/big
"""
import argparse
import gzip
import json
import os
import random

OPS = ["aten::mm", "aten::addmm", "aten::convolution", "aten::relu", "aten::add_", "aten::mul", "aten::sum"]
KERNELS = ["void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)",
           "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, T, T)",
           "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
           "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t>>(R)"]
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def rank_events(rank, world, a, rng, emit):
    def r(v):  # whole microseconds (PyTorch before 2.3), or nanoseconds as later ones write
        return round(v, 3) if a.ns else float(round(v))

    pid, tid = 1000 + rank, 1000 + rank
    dev = rank % 8
    t = 1_000_000.0  # us
    corr = 0
    ext = 0

    def host(name, ts, dur, cat="cpu_op", args=None):
        nonlocal ext
        ext += 1
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": r(ts), "dur": r(dur),
             "args": {"External id": ext, "Record function id": 0, "Ev Idx": ext}}
        if args:
            e["args"].update(args)
        emit(e)

    def launch(at, name, cat, dev_ts, dur, stream, extra=None):
        nonlocal corr
        corr += 1
        host("cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync", at, 4.0 + rng.random() * 3, "cuda_runtime",
             {"correlation": corr, "cbid": 211})
        args = {"External id": ext, "queued": 0, "device": dev, "context": 1, "stream": stream, "correlation": corr,
                "registers per thread": 64, "shared memory": 0, "blocks per SM": 1.5, "warps per SM": 12.0,
                "grid": [264, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 50}
        if extra:
            args.update(extra)
        emit({"ph": "X", "cat": cat, "name": name, "pid": dev, "tid": stream, "ts": r(dev_ts),
              "dur": r(dur), "args": args})

    for s in range(a.steps):
        step_begin = t
        wait = 50 + rng.random() * a.loader_us
        host("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t, wait, "user_annotation")
        t += wait
        host_t, dev_t = t, t + 10
        launch(host_t, "Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", dev_t, 40, 7,
               {"bytes": 3 << 20, "memory bandwidth (GB/s)": 78.6})
        dev_t += 40
        comm_free = 0.0
        for k in range(a.kernels):
            host_t += 6 + rng.random() * 6
            if rng.random() < 0.02:
                host_t += rng.random() * a.host_gap_us  # the host falls behind: the GPU idles
            op_begin = host_t - 2
            dur = 5 + rng.expovariate(1 / a.kernel_us)
            start = max(dev_t, host_t + 5)
            host(OPS[k % len(OPS)], op_begin, 12, "cpu_op", {"Sequence number": k, "Fwd thread id": 0})
            launch(host_t, KERNELS[k % len(KERNELS)], "kernel", start, dur, 7)
            dev_t = start + dur
            if k > a.kernels // 2 and k % max(1, a.kernels // 8) == 0:  # a bucket is ready
                cstart = max(dev_t, comm_free)
                cdur = a.comm_us * (0.5 + rng.random())
                launch(host_t + 1, NCCL, "kernel", cstart, cdur, 20)
                comm_free = cstart + cdur
        # The last bucket: its all-reduce runs after the backward, exposed.
        cstart = max(dev_t, comm_free)
        cdur = a.comm_us * (0.5 + rng.random())
        launch(host_t + 1, NCCL, "kernel", cstart, cdur, 20)
        dev_t = cstart + cdur
        step_end = max(host_t, dev_t) + 20
        host(f"ProfilerStep#{s}", step_begin, step_end - step_begin, "user_annotation")
        emit({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{s}", "pid": dev, "tid": 7,
              "ts": r(step_begin + 15), "dur": r(step_end - step_begin - 15), "args": {}})
        t = step_end


def write_rank(rank, a):
    rng = random.Random(a.seed * 1000 + rank)
    name = os.path.join(a.out, f"host{rank // 8}_{4000 + rank}.{1700000000000 + rank}.pt.trace.json")
    opener = gzip.open if a.gzip else open
    with opener(name + (".gz" if a.gzip else ""), "wt") as f:
        head = {"schemaVersion": 1,
                "deviceProperties": [{"id": d, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045510144,
                                      "computeMajor": 9, "computeMinor": 0, "numSms": 132} for d in range(8)],
                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": a.ranks},
                "record_shapes": 0, "with_stack": 0, "trace_id": f"{rank:032x}", "displayTimeUnit": "ms",
                "baseTimeNanoseconds": 1700000000000000000}
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = [True]

        def emit(e):
            f.write(("" if first[0] else ",\n") + json.dumps(e, separators=(",", ":")))
            first[0] = False

        rank_events(rank, a.ranks, a, rng, emit)
        f.write("\n]}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kernels", type=int, default=200, help="kernels launched per step")
    p.add_argument("--kernel-us", type=float, default=40.0, help="mean kernel time")
    p.add_argument("--comm-us", type=float, default=300.0, help="mean all-reduce kernel time")
    p.add_argument("--loader-us", type=float, default=500.0, help="longest wait for a batch")
    p.add_argument("--host-gap-us", type=float, default=400.0, help="longest host hiccup")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--ns", action="store_true",
                   help="nanosecond timestamps (HTA floors ts and dur to whole microseconds, which opens up to 1 us of"
                        " idle between back-to-back kernels; the default whole microseconds compare exactly)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for r in range(a.ranks):
        write_rank(r, a)
    print(a.out)


if __name__ == "__main__":
    main()
