#!/usr/bin/env bash
# A parallel mode on the CPU, dpbench against PyTorch's, in one invocation: MODE fsdp
# (dpbench --mode=fsdp against FSDP2's fully_shard, fsdp.py; --batch per rank) or tp
# (dpbench --mode=tp against torch.distributed.tensor.parallel, tp.py; every rank on the
# same batch, strong scaling). For each case, one rank (dpbench --mode=single; PyTorch
# without parallelism) and RANKS ranks over gloo, one thread per rank, AdamW; runs
# alternate and repeat (REPEAT); E = thr(N) / (N x thr(1)) from the medians.
#
#   PYTHON="$(benchmarks/pytorch_reference/venv.sh)" benchmarks/pytorch_reference/compare_parallel.sh MODE [OUT_DIR]
#
# Settings (environment): RANKS (2), STEPS (20), WARMUP (3), REPEAT (3), CASES
# (model:batch:seq; fsdp "gpt2-tiny:4:256 mlp:64:0", tp "gpt2-tiny:8:256 mlp:64:0"),
# DPBENCH, PYTHON.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODE="${1:-}"
case "$MODE" in
  fsdp) script=fsdp.py module=torch.distributed.fsdp default_cases="gpt2-tiny:4:256 mlp:64:0" ;;
  tp) script=tp.py module=torch.distributed.tensor.parallel default_cases="gpt2-tiny:8:256 mlp:64:0" ;;
  *) echo "compare_parallel.sh: MODE must be fsdp or tp, got '$MODE'" >&2; exit 2 ;;
esac
DPBENCH="${DPBENCH:-$here/../../build/benchmarks/dpbench/dpbench}"
PYTHON="${PYTHON:-$("$here/venv.sh")}"
RANKS="${RANKS:-2}" STEPS="${STEPS:-20}" WARMUP="${WARMUP:-3}" REPEAT="${REPEAT:-3}"
CASES="${CASES:-$default_cases}"
out="${2:-out/compare_$MODE}"
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE
[ -x "$DPBENCH" ] || { echo "compare_parallel.sh: $DPBENCH not built (run scripts/test.sh first)" >&2; exit 2; }
"$PYTHON" -c "import $module" 2>/dev/null || { echo "compare_parallel.sh: $PYTHON has no $module" >&2; exit 2; }

for r in $(seq "$REPEAT"); do
  for c in $CASES; do
    IFS=: read -r model batch seq <<<"$c"
    data=() tseq=()
    if [ "$model" != mlp ]; then data=(--data=synthetic --seq="$seq"); tseq=(--seq "$seq"); fi
    common=(--model="$model" --batch="$batch" "${data[@]}" --threads=1 --steps="$STEPS" --warmup="$WARMUP"
            --optimizer=adamw --lr=1e-3 --progress=none)
    $DPBENCH --mode=single "${common[@]}" --json="$out/dpbench_${model}_1_$r.json" > /dev/null 2>&1
    $DPBENCH --mode="$MODE" --gpus="$RANKS" "${common[@]}" --json="$out/dpbench_${model}_${RANKS}_$r.json" > /dev/null 2>&1
    for n in 1 "$RANKS"; do
      "$PYTHON" "$here/$script" --model "$model" --batch "$batch" "${tseq[@]}" --ranks "$n" --threads 1 \
        --steps "$STEPS" --warmup "$WARMUP" --json "$out/torch_${model}_${n}_$r.json" > /dev/null 2>&1
    done
  done
done

"$PYTHON" - "$out" "$RANKS" "$CASES" "$MODE" <<'PY'
import glob, json, os, platform, statistics, sys
out, n, cases, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
def thr(pattern, key):
    vals = []
    for f in glob.glob(os.path.join(out, pattern)):
        d = json.load(open(f))
        vals.append(d["runs"][0]["throughput_samples_per_s"] if key == "dpbench" else d["samples_per_s"])
    return statistics.median(vals)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
theirs, batch_key = ("fsdp2", "batch_per_rank") if mode == "fsdp" else ("tp", "batch")
label = {"fsdp": "FSDP, dpbench against PyTorch FSDP2", "tp": "Tensor parallelism, dpbench against PyTorch's, the same batch"}[mode]
rows = []
print(f"{label} on the CPU ({cpu}), {n} ranks vs 1, one thread each, AdamW; samples/s (median of runs)")
print(f"| model | {batch_key.replace('_', '/')} | dpbench 1 | dpbench {mode} {n} | dpbench E | PyTorch 1 | PyTorch {theirs} {n} | PyTorch E | ratio |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in cases:
    model, batch, seq = c.split(":")
    d1, dn = thr(f"dpbench_{model}_1_*.json", "dpbench"), thr(f"dpbench_{model}_{n}_*.json", "dpbench")
    t1, tn = thr(f"torch_{model}_1_*.json", "torch"), thr(f"torch_{model}_{n}_*.json", "torch")
    row = {"model": model, batch_key: int(batch), "seq": int(seq) or None, "ranks": n, "cpu": cpu,
           "dpbench_1": d1, f"dpbench_{mode}": dn, "dpbench_efficiency": dn / (n * d1), "torch_1": t1,
           f"torch_{theirs}": tn, "torch_efficiency": tn / (n * t1), "throughput_ratio": dn / tn}
    rows.append(row)
    print(f"| {model} | {batch} | {d1:.1f} | {dn:.1f} | {row['dpbench_efficiency']:.3f} | {t1:.1f} | {tn:.1f} | "
          f"{row['torch_efficiency']:.3f} | {row['throughput_ratio']:.2f}x |")
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
