#!/usr/bin/env bash
# dpbench against PyTorch on the same GPU, in one invocation: one training step of a
# model (default ResNet-18 at CIFAR-10 shape, batch 256) in fp32, tf32 and bf16.
#   dpbench: eager and with --cuda-graph
#   PyTorch: eager, NCHW and channels_last; torch.compile (tf32 and bf16, channels_last)
# Runs alternate and repeat (REPEAT); the summary takes the median of each.
#
#   DPBENCH="build/benchmarks/dpbench/dpbench" benchmarks/pytorch_reference/compare_cuda.sh [OUT_DIR]
#   DPBENCH="dist/dpbench/run dpbench" ...     # a package made by scripts/package.sh
#
# Settings (environment): MODEL, BATCH, STEPS, WARMUP, REPEAT, COMPILE=0|1, WORKERS (dpbench's
# loader threads; PyTorch's reference trains on one batch already on the GPU), PYTHON.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DPBENCH="${DPBENCH:-$here/../../build/benchmarks/dpbench/dpbench}"
PYTHON="${PYTHON:-python3}"
MODEL="${MODEL:-resnet18}"
BATCH="${BATCH:-256}"
STEPS="${STEPS:-100}"
WARMUP="${WARMUP:-20}"
REPEAT="${REPEAT:-2}"
COMPILE="${COMPILE:-1}"
WORKERS="${WORKERS:-8}"
out="${1:-out/compare_cuda}"
mkdir -p "$out"

for r in $(seq "$REPEAT"); do
  for p in fp32 tf32 bf16; do
    for g in eager graph; do
      flag=""
      [ "$g" = graph ] && flag="--cuda-graph"
      $DPBENCH --devices=cuda --model="$MODEL" --batch="$BATCH" --steps="$STEPS" --warmup="$WARMUP" \
        --precision="$p" $flag --workers="$WORKERS" --progress=none --json="$out/dpbench_${p}_${g}_$r.json" > "$out/dpbench_${p}_${g}_$r.txt"
    done
    for layout in nchw cl; do
      [ "$p" = fp32 ] && [ "$layout" = cl ] && continue
      cl=""
      [ "$layout" = cl ] && cl="--channels-last"
      "$PYTHON" "$here/train_step.py" --device cuda --model "$MODEL" --batch "$BATCH" --steps "$STEPS" \
        --warmup "$WARMUP" --precision "$p" $cl > "$out/pytorch_${p}_${layout}_$r.json"
    done
  done
done
if [ "$COMPILE" = 1 ]; then
  for p in tf32 bf16; do
    "$PYTHON" "$here/train_step.py" --device cuda --model "$MODEL" --batch "$BATCH" --steps "$STEPS" \
      --warmup "$WARMUP" --precision "$p" --channels-last --compile 2>/dev/null | tail -1 > "$out/pytorch_${p}_compile_1.json"
  done
fi

"$PYTHON" - "$out" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
def runs(pattern):
    return [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, pattern))) if os.path.getsize(f) > 0]
rows, summary = [], {}
for p in ["fp32", "tf32", "bf16"]:
    d = {g: runs(f"dpbench_{p}_{g}_*.json") for g in ["eager", "graph"]}
    t = {k: runs(f"pytorch_{p}_{k}_*.json") for k in ["nchw", "cl", "compile"]}
    med = lambda xs: statistics.median(xs) if xs else None
    ours = {g: med([r["runs"][0]["throughput_samples_per_s"] for r in d[g]]) for g in d}
    theirs = {k: med([r["samples_per_s"] for r in t[k]]) for k in t}
    eager_best = max([v for k, v in theirs.items() if k != "compile" and v] or [0]) or None
    rep = (d["graph"] or d["eager"])[0]["runs"][0]
    tflops = {g: (ours[g] * rep["flops_per_sample"] / 1e12 if ours[g] else None) for g in ours}
    mfu = {g: (tflops[g] * 1e12 / rep["peak_flops_per_s"] if ours[g] and rep.get("peak_flops_per_s") else None)
           for g in ours}
    summary[p] = {"dpbench": ours, "pytorch": theirs, "dpbench_tflops": tflops, "dpbench_mfu": mfu,
                  "ratio_eager_vs_pytorch_eager_best": ours["eager"] / eager_best if ours["eager"] and eager_best else None,
                  "ratio_graph_vs_pytorch_eager_best": ours["graph"] / eager_best if ours["graph"] and eager_best else None,
                  "ratio_graph_vs_pytorch_compile": ours["graph"] / theirs["compile"] if ours["graph"] and theirs["compile"] else None}
gpu = runs("pytorch_fp32_nchw_*.json")[0]["device"]
summary["device"] = gpu
summary["model"], summary["batch"] = os.environ.get("MODEL", "resnet18"), int(os.environ.get("BATCH", "256"))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
fmt = lambda v, f="{:,.0f}": "-" if v is None else f.format(v)
print(f"{summary['model']}, batch {summary['batch']}, {gpu}; samples/s (median of runs)")
print("| precision | dpbench eager | dpbench graph | PyTorch NCHW | PyTorch channels_last | torch.compile | "
      "graph / best PyTorch eager | dpbench graph TFLOP/s (MFU) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for p in ["fp32", "tf32", "bf16"]:
    s = summary[p]
    print(f"| {p} | {fmt(s['dpbench']['eager'])} | {fmt(s['dpbench']['graph'])} | {fmt(s['pytorch']['nchw'])} | "
          f"{fmt(s['pytorch']['cl'])} | {fmt(s['pytorch']['compile'])} | "
          f"{fmt(s['ratio_graph_vs_pytorch_eager_best'], '{:.2f}x')} | "
          f"{fmt(s['dpbench_tflops']['graph'], '{:.1f}')} ({fmt(s['dpbench_mfu']['graph'], '{:.1%}')}) |")
EOF
