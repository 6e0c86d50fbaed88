#!/usr/bin/env bash
# The main job: installs what is missing (Fashion-MNIST included), builds, then trains
# LeNet for one epoch on Fashion-MNIST on the CPU (on synthetic data when the dataset
# is not installed), prints throughput, loss, test accuracy and dpdoctor's verdict on the
# run, and writes the report (findings included) to out/report.json. Extra arguments are
# passed to dpbench (e.g. --epochs=15, or --mode=dp --gpus=2).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
mkdir -p "$DPB_ROOT/out"
dataset=(--dataset=synthetic --steps=200)
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  dataset=(--dataset=fashion-mnist --epochs=1)
fi
exec "$DPB_BUILD/benchmarks/dpbench/dpbench" --mode=single --model=lenet --batch=64 --lr=0.05 --warmup=5 \
  --workers=1 --doctor "${dataset[@]}" --json="$DPB_ROOT/out/report.json" "$@"
