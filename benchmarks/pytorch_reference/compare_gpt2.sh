#!/usr/bin/env bash
# dpbench against PyTorch training GPT-2: the same model (gpt2_reference.py's
# nanoGPT-style GPT, gpt2_train_step.py), batch x sequence, AdamW, the two run alternately
# REPEAT times in one invocation on one machine. Prints the median tokens/s of each and
# their ratio, with the processor or GPU; writes it as JSON to $OUT when set.
#
# CPU (DEVICE=cpu, the default): fp32, one process with THREADS threads.
#   PYTHON="$(benchmarks/pytorch_reference/venv.sh)" REPEAT=3 \
#     CASES="gpt2-tiny:4:256:10 gpt2:4:256:3" benchmarks/pytorch_reference/compare_gpt2.sh
# CUDA (DEVICE=cuda): PRECISION=fp32|tf32|bf16 (bf16: PyTorch under autocast), PyTorch
# both eager and torch.compile'd, and the MFU of each against the GPU's peak as dpbench
# reports it.
#   DEVICE=cuda PRECISION=bf16 CASES="gpt2:16:1024:20" benchmarks/pytorch_reference/compare_gpt2.sh
#
# CASES: model:batch:seq:steps. Needs a built tree (scripts/test.sh or scripts/run.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DPBENCH="${DPBENCH:-$ROOT/build/benchmarks/dpbench/dpbench}"
PYTHON="${PYTHON:-$("$ROOT/benchmarks/pytorch_reference/venv.sh")}"
THREADS="${THREADS:-1}"
REPEAT="${REPEAT:-3}"
WARMUP="${WARMUP:-2}"
CASES="${CASES:-gpt2-tiny:4:256:10 gpt2:4:256:3}"
DEVICE="${DEVICE:-cpu}"
PRECISION="${PRECISION:-fp32}"
case "$DEVICE:$PRECISION" in
  cpu:fp32 | cuda:fp32 | cuda:tf32 | cuda:bf16) ;;
  *) echo "compare_gpt2.sh: DEVICE=$DEVICE PRECISION=$PRECISION (valid: cpu with fp32; cuda with fp32, tf32, bf16)" >&2; exit 2 ;;
esac
flavours=(eager)
[ "$DEVICE" = cuda ] && flavours=(eager compile)
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

[ -x "$DPBENCH" ] || { echo "compare_gpt2.sh: $DPBENCH not built (run scripts/test.sh first)" >&2; exit 2; }
"$PYTHON" -c "import torch" 2>/dev/null || { echo "compare_gpt2.sh: $PYTHON has no torch" >&2; exit 2; }

for case in $CASES; do
  IFS=: read -r model batch seq steps <<<"$case"
  for r in $(seq 1 "$REPEAT"); do
    "$DPBENCH" --mode=single --devices="$DEVICE" --precision="$PRECISION" --model="$model" --batch="$batch" \
      --seq="$seq" --threads="$THREADS" --steps="$steps" --warmup="$WARMUP" --optimizer=adamw --lr=1e-4 \
      --progress=none --json="$TMP/dpb_${model}_$r.json" >"$TMP/dpb_${model}_$r.log" 2>&1 ||
      { echo "compare_gpt2.sh: dpbench failed:" >&2; cat "$TMP/dpb_${model}_$r.log" >&2; exit 1; }
    for fl in "${flavours[@]}"; do
      OMP_NUM_THREADS="$THREADS" "$PYTHON" "$ROOT/benchmarks/pytorch_reference/gpt2_train_step.py" --model "$model" \
        --batch "$batch" --seq "$seq" --threads "$THREADS" --steps "$steps" --warmup "$WARMUP" --device "$DEVICE" \
        --precision "$PRECISION" $([ "$fl" = compile ] && echo --compile) > "$TMP/pt_${fl}_${model}_$r.json"
    done
  done
done

"$PYTHON" - "$TMP" "$THREADS" "$REPEAT" "$CASES" "${OUT:-}" "$DEVICE" "$PRECISION" "${flavours[@]}" <<'PY'
import glob, json, statistics, subprocess, sys
tmp, threads, repeat, cases, out, device, precision = sys.argv[1:8]
flavours = sys.argv[8:]
threads, repeat, cases = int(threads), int(repeat), cases.split()
if device == "cuda":
    where = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True).stdout.strip().splitlines()[0]
else:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    where = f"{cpu} ({'AVX-512' if 'avx512f' in flags else 'AVX2' if 'avx2' in flags else 'SSE'}), {threads} thread(s)"
rows, torch_version = [], "?"
for case in cases:
    model, batch, seq, steps = case.split(":")
    reps = [json.load(open(f))["runs"][0] for f in sorted(glob.glob(f"{tmp}/dpb_{model}_*.json"))]
    row = {"model": model, "batch": int(batch), "seq": int(seq), "steps": int(steps), "device": device,
           "precision": precision, "threads": threads, "repeat": repeat,
           "dpbench_tokens_per_s": statistics.median(r["throughput_tokens_per_s"] for r in reps),
           "dpbench_runs": [r["throughput_tokens_per_s"] for r in reps],
           "dpbench_mfu": statistics.median(r["mfu"] for r in reps) if all(r.get("mfu") for r in reps) else None}
    peak = reps[0].get("peak_flops_per_s")
    for fl in flavours:
        ref = [json.load(open(f)) for f in sorted(glob.glob(f"{tmp}/pt_{fl}_{model}_*.json"))]
        torch_version = ref[0]["torch"]
        tps = statistics.median(r["tokens_per_s"] for r in ref)
        row[f"pytorch_{fl}_tokens_per_s"] = tps
        row[f"pytorch_{fl}_runs"] = [r["tokens_per_s"] for r in ref]
        row[f"pytorch_{fl}_mfu"] = tps * ref[0]["flops_per_token"] / peak if peak else None
        row[f"ratio_to_{fl}"] = row["dpbench_tokens_per_s"] / tps
    rows.append(row)
print(f"{where}, {precision}, median of {repeat} alternated runs each, PyTorch {torch_version}")
head = f"{'model':>10} {'batch x seq':>12} {'dpbench tok/s':>14}" + "".join(f" {'torch ' + fl + ' tok/s':>20} {'ratio':>7}" for fl in flavours)
print(head + ("   MFU dpbench / torch" if device == "cuda" else ""))
for r in rows:
    line = f"{r['model']:>10} {str(r['batch']) + ' x ' + str(r['seq']):>12} {r['dpbench_tokens_per_s']:>14.1f}"
    for fl in flavours:
        line += f" {r[f'pytorch_{fl}_tokens_per_s']:>20.1f} {r[f'ratio_to_{fl}']:>6.2f}x"
    if device == "cuda":
        pct = lambda v: f"{100 * v:.1f}%" if v else "n/a"
        line += "   " + " / ".join([pct(r["dpbench_mfu"])] + [pct(r[f"pytorch_{fl}_mfu"]) for fl in flavours])
    print(line)
if out:
    with open(out, "w") as f:
        json.dump({"where": where, "device": device, "precision": precision, "torch": torch_version, "results": rows},
                  f, indent=2)
PY
