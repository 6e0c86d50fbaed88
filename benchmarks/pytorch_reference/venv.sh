#!/usr/bin/env bash
# The reference tools for comparisons (never runtime dependencies): current PyTorch and
# Holistic Trace Analysis from PyPI, in a virtual environment of their own. Prints the
# environment's python on stdout, so scripts do:  PY="$(benchmarks/pytorch_reference/venv.sh)"
#
#   VENV=.venv-ref  TORCH=2.15.0  HTA=0.5.0   (defaults; the venv is made once and reused)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv-ref}"
TORCH="${TORCH:-2.15.0}"
HTA="${HTA:-0.5.0}"
PY="$VENV/bin/python"

have() {
  "$PY" - "$TORCH" "$HTA" <<'PYCHECK' 2>/dev/null
import importlib.metadata as m, sys
ok = m.version("torch").split("+")[0] == sys.argv[1] and m.version("holistictraceanalysis") == sys.argv[2]
m.version("safetensors")  # gpt2_reference.py's checkpoints
sys.exit(0 if ok else 1)
PYCHECK
}

if [ -x "$PY" ] && have; then echo "$PY"; exit 0; fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv; } >&2
fi
python3 -m venv "$VENV" >&2
"$PY" -m pip install -q --upgrade pip >&2
"$PY" -m pip install -q "torch==$TORCH" "holistictraceanalysis==$HTA" safetensors >&2
have || { echo "venv.sh: $VENV lacks torch $TORCH or HTA $HTA after installing" >&2; exit 2; }
echo "$PY"
