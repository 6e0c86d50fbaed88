#!/usr/bin/env bash
# FSDP on the CPU, dpbench against PyTorch FSDP2: compare_parallel.sh fsdp (see there).
#
#   PYTHON="$(benchmarks/pytorch_reference/venv.sh)" benchmarks/pytorch_reference/compare_fsdp.sh [OUT_DIR]
exec "$(dirname "${BASH_SOURCE[0]}")/compare_parallel.sh" fsdp "$@"
