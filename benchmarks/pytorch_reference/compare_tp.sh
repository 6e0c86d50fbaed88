#!/usr/bin/env bash
# Tensor parallelism on the CPU, dpbench against PyTorch's: compare_parallel.sh tp (see there).
#
#   PYTHON="$(benchmarks/pytorch_reference/venv.sh)" benchmarks/pytorch_reference/compare_tp.sh [OUT_DIR]
exec "$(dirname "${BASH_SOURCE[0]}")/compare_parallel.sh" tp "$@"
