#!/usr/bin/env bash
# dpbench started by PyTorch's own torchrun agent, once per node, on two nodes in one box
# (scripts/cluster.sh: network namespaces, each with its own address and host name): what
# a user runs on two real nodes, with node 0's address as --master-addr. Each case trains
# across the nodes and --verify's it against single-device training; the report must name
# each rank's host. Prints one line per case; exits 1 if any failed. Needs root.
#
#   benchmarks/pytorch_reference/torchrun_two_nodes.sh [--rate=1gbit]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RATE="${1:---rate=1gbit}"
PY="$("$ROOT/benchmarks/pytorch_reference/venv.sh")"
TORCHRUN="$(dirname "$PY")/torchrun"
DPBENCH="${DPBENCH:-$ROOT/build/benchmarks/dpbench/dpbench}"
CLUSTER="$ROOT/scripts/cluster.sh"
export DPB_CLUSTER=dpbtr
WORK="$(mktemp -d)"
trap '"$CLUSTER" down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT INT TERM
"$CLUSTER" up 2 "$RATE"
MASTER="$("$CLUSTER" addr 0)"

# mode, model and flags of each case.
CASES=(
  "ddp resnet18 --batch=16 --steps=4 --sync-bn --verify-steps=1"
  "ddp mlp --batch=16 --steps=4"
  "fsdp gpt2-tiny --batch=16 --seq=32 --steps=4"
  "tp gpt2-tiny --batch=8 --seq=32 --steps=4"
)
failed=0
port=29533
# Both nodes' torchrun agents with dpbench's flags; node 0's output in $WORK/$1.log.
both() {
  local tag="$1" code=0 other
  shift
  port=$((port + 2))  # the agent's store on port, dpbench's on port + 1
  node() {
    local k="$1"
    shift
    "$CLUSTER" run "$k" -- env DPB_STORE_TOKEN=torchrun-two-nodes "$TORCHRUN" --nnodes=2 --node-rank="$k" \
      --nproc-per-node=1 --master-addr="$MASTER" --master-port="$port" --no-python "$DPBENCH" "$@"
  }
  node 1 "$@" >"$WORK/$tag-node1.log" 2>&1 &
  other=$!
  node 0 "$@" >"$WORK/$tag.log" 2>&1 || code=$?
  wait "$other" || code=$((code == 0 ? $? : code))
  if [ "$code" -ne 0 ]; then
    for f in "$WORK/$tag.log" "$WORK/$tag-node1.log"; do grep -v '^\[W\|^frame #' "$f" | tail -n 15 >&2; done
  fi
  return "$code"
}
for c in "${CASES[@]}"; do
  set -- $c
  mode=$1 model=$2
  shift 2
  common=(--mode="$mode" --model="$model" "$@" --warmup=1 --threads=1 --timeout=60 --progress=none)
  # A training run and its report, then --verify against single-device training.
  code=0
  both train "${common[@]}" --json="$WORK/report.json" || code=$?
  both verify "${common[@]}" --verify || code=$((code == 0 ? $? : code))
  verdict="$(grep -o 'tolerance [0-9.e-]*: [A-Z]*' "$WORK/verify.log" | tail -1 || true)"
  hosts="$("$PY" -c 'import json,sys; print(" ".join(r["host"] for r in json.load(open(sys.argv[1]))["runs"][0]["ranks"]))' \
    "$WORK/report.json" 2>"$WORK/py.err" || echo "no report: $(tail -n 1 "$WORK/py.err")")"
  echo "$mode $model $*: exit $code; verify ${verdict:-missing}; hosts $hosts"
  if [ "$code" -ne 0 ] || [[ "$verdict" != *PASS ]] || [ "$hosts" != "dpbtr-n0 dpbtr-n1" ]; then failed=1; fi
  rm -f "$WORK/report.json"
done
exit $failed
