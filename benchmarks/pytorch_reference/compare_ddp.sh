#!/usr/bin/env bash
# DDP scaling on the CPU, dpbench against PyTorch, in one invocation: for each model, one
# rank (dpbench --mode=single; PyTorch without DDP) and RANKS ranks (dpbench --mode=ddp;
# torch DistributedDataParallel on gloo), THREADS threads per rank, the same batch per
# rank; runs alternate and repeat (REPEAT); scaling efficiency E = thr(N) / (N x thr(1))
# from the medians.
#
#   benchmarks/pytorch_reference/compare_ddp.sh [OUT_DIR]
#
# Settings (environment): RANKS (2), THREADS (1), STEPS (30), WARMUP (5), REPEAT (3),
# CASES ("lenet:64 resnet18:16"), DPBENCH, PYTHON (Debian's /usr/bin/python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DPBENCH="${DPBENCH:-$here/../../build/benchmarks/dpbench/dpbench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
RANKS="${RANKS:-2}" THREADS="${THREADS:-1}" STEPS="${STEPS:-30}" WARMUP="${WARMUP:-5}" REPEAT="${REPEAT:-3}"
CASES="${CASES:-lenet:64 resnet18:16}"
out="${1:-out/compare_ddp}"
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE

for r in $(seq "$REPEAT"); do
  for c in $CASES; do
    model="${c%%:*}" batch="${c##*:}"
    $DPBENCH --mode=single --model="$model" --batch="$batch" --threads="$THREADS" --steps="$STEPS" \
      --warmup="$WARMUP" --progress=none --json="$out/dpbench_${model}_1_$r.json" > /dev/null 2>&1
    $DPBENCH --mode=ddp --gpus="$RANKS" --model="$model" --batch="$batch" --threads="$THREADS" --steps="$STEPS" \
      --warmup="$WARMUP" --progress=none --json="$out/dpbench_${model}_${RANKS}_$r.json" > /dev/null 2>&1
    "$PYTHON" "$here/ddp.py" --model "$model" --batch "$batch" --ranks 1 --threads "$THREADS" --steps "$STEPS" \
      --warmup "$WARMUP" --json "$out/torch_${model}_1_$r.json" > /dev/null 2>&1
    "$PYTHON" "$here/ddp.py" --model "$model" --batch "$batch" --ranks "$RANKS" --threads "$THREADS" \
      --steps "$STEPS" --warmup "$WARMUP" --json "$out/torch_${model}_${RANKS}_$r.json" > /dev/null 2>&1
  done
done

"$PYTHON" - "$out" "$RANKS" "$CASES" <<'EOF'
import glob, json, os, statistics, sys
out, n, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def thr(pattern, key):
    vals = []
    for f in glob.glob(os.path.join(out, pattern)):
        d = json.load(open(f))
        vals.append(d["runs"][0]["throughput_samples_per_s"] if key == "dpbench" else d["samples_per_s"])
    return statistics.median(vals)
rows = []
print(f"DDP on the CPU, {n} ranks vs 1; samples/s (median of runs); E = thr({n}) / ({n} x thr(1))")
print("| model | batch/rank | dpbench 1 | dpbench " + str(n) + " | dpbench E | PyTorch 1 | PyTorch " + str(n) +
      " | PyTorch E | throughput ratio |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in cases:
    model, batch = c.split(":")
    d1, dn = thr(f"dpbench_{model}_1_*.json", "dpbench"), thr(f"dpbench_{model}_{n}_*.json", "dpbench")
    t1, tn = thr(f"torch_{model}_1_*.json", "torch"), thr(f"torch_{model}_{n}_*.json", "torch")
    row = {"model": model, "batch_per_rank": int(batch), "ranks": n, "dpbench_1": d1, "dpbench_n": dn,
           "dpbench_efficiency": dn / (n * d1), "torch_1": t1, "torch_n": tn, "torch_efficiency": tn / (n * t1),
           "throughput_ratio": dn / tn}
    rows.append(row)
    print(f"| {model} | {batch} | {d1:.1f} | {dn:.1f} | {row['dpbench_efficiency']:.3f} | {t1:.1f} | {tn:.1f} | "
          f"{row['torch_efficiency']:.3f} | {row['throughput_ratio']:.2f}x |")
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
