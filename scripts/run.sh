#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a short dpbench
# training run on the CPU and writes its report to out/report.json.
# Extra arguments are passed to dpbench (e.g. --model=resnet18 --batch=16).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
mkdir -p "$DPB_ROOT/out"
exec "$DPB_BUILD/benchmarks/dpbench/dpbench" --mode=single --model=lenet --batch=64 --steps=30 --warmup=5 \
  --json="$DPB_ROOT/out/report.json" "$@"
