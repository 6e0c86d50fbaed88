#!/usr/bin/env bash
# Tensor parallelism on the CPU, dpbench against PyTorch's (torch.distributed.tensor.parallel),
# in one invocation: for each case, one rank (dpbench --mode=single; PyTorch without
# parallelism) and RANKS ranks (dpbench --mode=tp; tp.py's plan on gloo), one thread per
# rank, the same batch on every rank, AdamW; runs alternate and repeat (REPEAT);
# E = thr(N) / (N x thr(1)) from the medians (strong scaling: the batch does not grow).
#
#   PYTHON="$(benchmarks/pytorch_reference/venv.sh)" benchmarks/pytorch_reference/compare_tp.sh [OUT_DIR]
#
# Settings (environment): RANKS (2), STEPS (20), WARMUP (3), REPEAT (3),
# CASES ("gpt2-tiny:8:256 mlp:64:0", model:batch:seq), DPBENCH, PYTHON.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DPBENCH="${DPBENCH:-$here/../../build/benchmarks/dpbench/dpbench}"
PYTHON="${PYTHON:-$("$here/venv.sh")}"
RANKS="${RANKS:-2}" STEPS="${STEPS:-20}" WARMUP="${WARMUP:-3}" REPEAT="${REPEAT:-3}"
CASES="${CASES:-gpt2-tiny:8:256 mlp:64:0}"
out="${1:-out/compare_tp}"
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE
[ -x "$DPBENCH" ] || { echo "compare_tp.sh: $DPBENCH not built (run scripts/test.sh first)" >&2; exit 2; }
"$PYTHON" -c "import torch.distributed.tensor.parallel" 2>/dev/null ||
  { echo "compare_tp.sh: $PYTHON has no torch tensor parallelism" >&2; exit 2; }

for r in $(seq "$REPEAT"); do
  for c in $CASES; do
    IFS=: read -r model batch seq <<<"$c"
    data=() tseq=()
    if [ "$model" != mlp ]; then data=(--data=synthetic --seq="$seq"); tseq=(--seq "$seq"); fi
    common=(--model="$model" --batch="$batch" "${data[@]}" --threads=1 --steps="$STEPS" --warmup="$WARMUP"
            --optimizer=adamw --lr=1e-3 --progress=none)
    $DPBENCH --mode=single "${common[@]}" --json="$out/dpbench_${model}_1_$r.json" > /dev/null 2>&1
    $DPBENCH --mode=tp --gpus="$RANKS" "${common[@]}" --json="$out/dpbench_${model}_${RANKS}_$r.json" > /dev/null 2>&1
    for n in 1 "$RANKS"; do
      "$PYTHON" "$here/tp.py" --model "$model" --batch "$batch" "${tseq[@]}" --ranks "$n" --threads 1 \
        --steps "$STEPS" --warmup "$WARMUP" --json "$out/torch_${model}_${n}_$r.json" > /dev/null 2>&1
    done
  done
done

"$PYTHON" - "$out" "$RANKS" "$CASES" <<'PY'
import glob, json, os, platform, statistics, sys
out, n, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def thr(pattern, key):
    vals = []
    for f in glob.glob(os.path.join(out, pattern)):
        d = json.load(open(f))
        vals.append(d["runs"][0]["throughput_samples_per_s"] if key == "dpbench" else d["samples_per_s"])
    return statistics.median(vals)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
rows = []
print(f"Tensor parallelism on the CPU ({cpu}), {n} ranks vs 1, one thread each, the same batch, AdamW; "
      "samples/s (median of runs)")
print(f"| model | batch | dpbench 1 | dpbench tp {n} | dpbench E | PyTorch 1 | PyTorch tp {n} | PyTorch E | ratio |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in cases:
    model, batch, seq = c.split(":")
    d1, dn = thr(f"dpbench_{model}_1_*.json", "dpbench"), thr(f"dpbench_{model}_{n}_*.json", "dpbench")
    t1, tn = thr(f"torch_{model}_1_*.json", "torch"), thr(f"torch_{model}_{n}_*.json", "torch")
    row = {"model": model, "batch": int(batch), "seq": int(seq) or None, "ranks": n, "cpu": cpu,
           "dpbench_1": d1, "dpbench_tp": dn, "dpbench_efficiency": dn / (n * d1), "torch_1": t1,
           "torch_tp": tn, "torch_efficiency": tn / (n * t1), "throughput_ratio": dn / tn}
    rows.append(row)
    print(f"| {model} | {batch} | {d1:.1f} | {dn:.1f} | {row['dpbench_efficiency']:.3f} | {t1:.1f} | {tn:.1f} | "
          f"{row['torch_efficiency']:.3f} | {row['throughput_ratio']:.2f}x |")
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
