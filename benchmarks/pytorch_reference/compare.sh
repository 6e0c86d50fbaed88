#!/usr/bin/env bash
# dpbench vs PyTorch, one CPU training step, same model, batch and thread count, run
# alternately REPEAT times in one invocation on one machine. Prints a table of the
# median samples/s of each and their ratio; writes it as JSON to $OUT when set.
#
#   THREADS=1 REPEAT=3 STEPS=20 benchmarks/pytorch_reference/compare.sh
#
# Needs a built tree (scripts/run.sh or scripts/test.sh) and python3 with torch
# (Debian: apt-get install python3-torch).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DPBENCH="${DPBENCH:-$ROOT/build/benchmarks/dpbench/dpbench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
THREADS="${THREADS:-1}"
REPEAT="${REPEAT:-3}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-5}"
CASES="${CASES:-mlp:64 lenet:64 resnet18:16}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

[ -x "$DPBENCH" ] || { echo "compare.sh: $DPBENCH not built (run scripts/test.sh first)" >&2; exit 2; }
"$PYTHON" -c "import torch" 2>/dev/null || { echo "compare.sh: $PYTHON has no torch (apt-get install python3-torch)" >&2; exit 2; }

for case in $CASES; do
  model="${case%%:*}"; batch="${case##*:}"
  for r in $(seq 1 "$REPEAT"); do
    "$DPBENCH" --mode=single --model="$model" --batch="$batch" --threads="$THREADS" --steps="$STEPS" \
      --warmup="$WARMUP" --json="$TMP/dpb_${model}_$r.json" >/dev/null 2>&1
    "$PYTHON" "$ROOT/benchmarks/pytorch_reference/train_step.py" --model "$model" --batch "$batch" \
      --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" > "$TMP/pt_${model}_$r.json"
  done
done

"$PYTHON" - "$TMP" "$THREADS" "$REPEAT" "$CASES" "${OUT:-}" <<'PY'
import glob, json, os, platform, statistics, sys
tmp, threads, repeat, cases, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
rows = []
for case in cases:
    model, batch = case.split(":")
    ours = [json.load(open(f))["runs"][0]["throughput_samples_per_s"] for f in sorted(glob.glob(f"{tmp}/dpb_{model}_*.json"))]
    ref = [json.loads(open(f).read())["samples_per_s"] for f in sorted(glob.glob(f"{tmp}/pt_{model}_*.json"))]
    rows.append({"model": model, "batch": int(batch), "threads": threads, "repeat": repeat,
                 "dpbench_samples_per_s": statistics.median(ours), "pytorch_samples_per_s": statistics.median(ref),
                 "dpbench_runs": ours, "pytorch_runs": ref})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"CPU: {cpu}, {threads} thread(s), median of {repeat} runs each")
print(f"{'model':>9} {'batch':>5} {'dpbench/s':>11} {'pytorch/s':>11} {'ratio':>7}")
for r in rows:
    r["ratio"] = r["dpbench_samples_per_s"] / r["pytorch_samples_per_s"]
    print(f"{r['model']:>9} {r['batch']:>5} {r['dpbench_samples_per_s']:>11.1f} {r['pytorch_samples_per_s']:>11.1f} {r['ratio']:>6.2f}x")
if out:
    import torch
    with open(out, "w") as f:
        json.dump({"cpu": cpu, "torch": torch.__version__, "results": rows}, f, indent=2)
PY
