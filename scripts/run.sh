#!/usr/bin/env bash
# The main job: installs what is missing (Fashion-MNIST included), builds, then runs a
# small scaling sweep of DistributedDataParallel (the mode PyTorch recommends) over 1..N
# devices: GPUs where present, else logical CPU devices (one per core), LeNet for one
# epoch of Fashion-MNIST at each point (synthetic data when the dataset is not
# installed). It prints each run, the scaling efficiency, dpdoctor's verdict on the
# largest run, and writes out/report.json and the HTML page out/report.html. Extra
# arguments go to dpbench (e.g. --model=resnet18 --batch=16, or --mode=dp). With a
# GPT-2 model (--model=gpt2-tiny) the sweep trains it with AdamW on byte-level tokens
# of a real text, the GNU GPL's (every Debian system has it), for two epochs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
mkdir -p "$DPB_ROOT/out"

devices=(--devices=cpu)
n=$(nproc)
if command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') && [ "$gpus" -gt 0 ]; then
  devices=(--devices=cuda)
  n=$gpus
fi
# 1, 2, 4, ... up to N, and N itself.
counts=1
for ((k = 2; k < n; k *= 2)); do counts+=",$k"; done
[ "$n" -gt 1 ] && counts+=",$n"

dataset=(--dataset=synthetic --steps=200)
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  dataset=(--dataset=fashion-mnist --epochs=1)
fi
workload=(--model=lenet --batch=64 --lr=0.05)
for arg in "$@"; do
  case "$arg" in
    --model=gpt2*)
      workload=(--optimizer=adamw --lr=1e-3 --batch=8 --seq=128 --clip-grad-norm=1)
      dataset=(--data=text:/usr/share/common-licenses/GPL-3 --epochs=2)
      ;;
  esac
done
report="$DPB_ROOT/out/report.json"
"$DPB_BUILD/benchmarks/dpbench/dpbench" --mode=ddp --gpus="$counts" "${devices[@]}" "${workload[@]}" \
  --warmup=5 --progress=none --doctor "${dataset[@]}" --json="$report" "$@"
"$DPB_BUILD/reports/dpreport" html "$report" -o "$DPB_ROOT/out/report.html" 2>/dev/null
echo "report: $report"
echo "HTML report: $DPB_ROOT/out/report.html"
