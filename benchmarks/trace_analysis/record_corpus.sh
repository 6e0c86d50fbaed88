#!/usr/bin/env bash
# Records the corpus of real PyTorch profiler traces in tests/data/traces: the CPU cases
# with the reference PyTorch (venv.sh), and on a machine with a GPU the GPU cases with the
# PyTorch there (PY=python3 to use it). Each trace is gzipped, named by case and rank, and
# HTA's figures are recorded in tests/data/traces/hta_figures.json (hta_agreement.py --record).
#
#   benchmarks/trace_analysis/record_corpus.sh            # CPU cases (+ GPU cases if a GPU)
#   GPU_ONLY=1 PY=python3 benchmarks/trace_analysis/record_corpus.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PY:-$("$ROOT/benchmarks/pytorch_reference/venv.sh")}"
PROFILE="$ROOT/benchmarks/pytorch_reference/profile_trace.py"
CORPUS="$ROOT/tests/data/traces"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# name, then the profile_trace.py arguments (ddp, fsdp and tp cases run under torchrun with 2 ranks)
CPU_CASES=(
  "cpu-healthy|--case healthy --device cpu --threads 1"
  "cpu-slow-loader|--case slow-loader --device cpu --threads 1 --delay-ms 1"
  "cpu-ddp-gloo|--case ddp --device cpu --threads 1 --batch 64"
  "cpu-fsdp2-gloo|--case fsdp --device cpu --threads 1 --batch 64"
  "cpu-tp-gloo|--case tp --device cpu --threads 1 --batch 64"
)
GPU_CASES=(
  "gpu-healthy|--case healthy --device cuda"
  "gpu-launch-bound|--case launch-bound"
  "gpu-item-sync|--case item-sync"
  "gpu-slow-loader|--case slow-loader --device cuda --delay-ms 0.5"
  "gpu-pageable|--case pageable"
  "gpu-resnet50-bf16|--case resnet50 --steps 2"
  "gpu-ddp-gloo-shared|--case ddp --device cuda --backend gloo --batch 128"
  "gpu-fsdp2-gloo-shared|--case fsdp --device cuda --backend gloo --batch 128"
  "gpu-tp-gloo-shared|--case tp --device cuda --backend gloo --batch 128"
  "gpu-dp-device0|--case dp-device0"
  "gpu-dp-all|--case dp"
)
cases=()
[ -n "${GPU_ONLY:-}" ] || cases+=("${CPU_CASES[@]}")
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cases+=("${GPU_CASES[@]}"); fi

for c in "${cases[@]}"; do
  name="${c%%|*}"; args="${c#*|}"
  out="$TMP/$name"
  if [[ "$args" == *"--case ddp"* || "$args" == *"--case fsdp"* || "$args" == *"--case tp"* ]]; then
    "$PY" -m torch.distributed.run --nproc-per-node=2 --master-port=29561 "$PROFILE" $args --out "$out" >/dev/null
  else
    "$PY" "$PROFILE" $args --out "$out" >/dev/null
  fi
  rm -rf "${CORPUS:?}/$name"; mkdir -p "$CORPUS/$name"
  for f in "$out"/*.pt.trace.json; do
    base="$(basename "$f")"; base="${base%%.*}"   # case_rankN (the handler's timestamp dropped)
    gzip -9 -c "$f" > "$CORPUS/$name/$base.pt.trace.json.gz"
  done
  echo "$name: $(du -sh "$CORPUS/$name" | cut -f1)"
done
"$PY" "$ROOT/benchmarks/trace_analysis/hta_agreement.py" --record || true
