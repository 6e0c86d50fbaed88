#!/usr/bin/env bash
# Everything that needs a GPU, in as few commands as a borrowed GPU machine allows: one
# GPU, no network, its own PyTorch, and none of the Debian packages this project builds
# against. The build happens on a machine that has them; the GPU machine runs what was
# built.
#
#   scripts/gpu-check.sh pack             # on the build machine (no GPU needed): builds with
#                                         # CUDA and writes dist/gpu-check.tar.xz (binaries, the
#                                         # CTest files, the non-CUDA libraries; ~22 MB) and
#                                         # dist/gpu-check-hta.tgz (HTA's wheels, for measure;
#                                         # ~24 MB): together under 64 MiB
#   scripts/gpu-check.sh build-and-test   # on the GPU machine, from the repository root with
#                                         # dist/gpu-check.tar.xz beside it: the whole test suite,
#                                         # CUDA tests included (<= 10 minutes)
#   scripts/gpu-check.sh measure          # on the GPU machine: every mode, the timing sources
#                                         # (each source named, the collectors' cost; CUPTI's
#                                         # figures against ncu's and torch.profiler's), the GPU
#                                         # trace corpus with dpdoctor and HTA, the speed against
#                                         # PyTorch eager and torch.compile (<= 10 minutes)
#
# Results go to $OUT (else out/gpu-check/), at most 8 files:
#   summary.md           what passed and what did not, step by step (both commands add to it)
#   tests.log            the CUDA build's test suite (ctest --output-on-failure)
#   modes.log            dpbench in every mode, --device-timing=auto|cupti|events|off, and
#                        the ncu and torch.profiler comparisons' errors
#   modes.tar.gz         the reports of those runs
#   corpus.tar.gz        the GPU trace corpus cases recorded here (tests/data/traces/gpu-*)
#   doctor.log           dpdoctor and HTA on those traces
#   speed.log            dpbench against PyTorch eager and torch.compile, fp32/tf32/bf16, and
#                        GPT-2 in bf16 with each one's MFU, its attention fused and not
# Checked, these become reports/results/gpu-<date>.md and the GPU cases in tests/data.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/out/gpu-check}"
PACK="$ROOT/dist/gpu-check.tar.xz"
STAGE="$ROOT/dist/gpu-check"
mkdir -p "$OUT"
summary="$OUT/summary.md"
CHECKS="$ROOT/benchmarks/gpu_check/checks.py"

say() { echo "$*" | tee -a "$summary"; }
# step NAME LOG CMD...: runs CMD, its output appended to LOG, and says how it went.
step() {
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS rc
  { echo "=== $name: $*"; "$@"; } >>"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then say "- [pass] $name ($((SECONDS - t0)) s)"; else say "- [FAIL] $name: exit $rc ($((SECONDS - t0)) s, see $(basename "$log"))"; fi
  return $rc
}

pack() {
  # shellcheck source=scripts/setup.sh
  source "$ROOT/scripts/setup.sh" || exit 2
  local build="${DPB_BUILD:-$ROOT/build}"
  if ! grep -q 'libcudart' <(ldd "$build/benchmarks/dpbench/dpbench" 2>/dev/null); then
    echo "gpu-check pack: $build was built without the CUDA backend (configure with -DDPB_CUDA=ON)" >&2
    exit 2
  fi
  rm -rf "$STAGE" && mkdir -p "$STAGE/lib" "$STAGE/wheels"
  # The executables at their build paths (tests find the binaries and data where CMake put
  # them), CTest's files, and the shared libraries the GPU machine lacks.
  (cd "$ROOT" && find "$(realpath --relative-to="$ROOT" "$build")" \
      \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) -print) >"$STAGE/files"
  (cd "$ROOT" && find "$(realpath --relative-to="$ROOT" "$build")"/{benchmarks,diagnostics,reports,tests} \
      -maxdepth 3 -type f -perm -u+x ! -name '*.so*' ! -name '*.sh' -print |
      while read -r f; do file -b "$f" | grep -q '^ELF' && echo "$f"; done) >>"$STAGE/files"
  # The CUPTI probe a PyTorch process loads (cupti_vs_kineto.py).
  (cd "$ROOT" && find "$(realpath --relative-to="$ROOT" "$build")"/benchmarks -maxdepth 1 -name 'libdpb_cupti_probe.so' \
      -print) >>"$STAGE/files"
  # The libraries: package.sh's (what the binaries need beyond the C/C++ runtime and CUDA).
  "$ROOT/scripts/package.sh" "$build" "$STAGE/pkg" >&2 || exit 2
  rmdir "$STAGE/lib" && mv "$STAGE/pkg/lib" "$STAGE/lib" && rm -rf "$STAGE/pkg"
  echo "$ROOT" >"$STAGE/source_dir"
  git -C "$ROOT" rev-parse HEAD >"$STAGE/commit" 2>/dev/null || true
  # xz, not gzip: 22 MB where gzip made 45 (with HTA's 24 MB, over what one carry holds).
  tar -C "$ROOT" -cf - -T "$STAGE/files" -C "$ROOT/dist" gpu-check/lib gpu-check/source_dir gpu-check/commit |
    xz -T0 -6 >"$PACK.tmp" && mv "$PACK.tmp" "$PACK"
  echo "gpu-check pack: $(wc -l <"$STAGE/files") files, $(ls "$STAGE/lib" | wc -l) libraries, $(du -h "$PACK" | cut -f1) in $PACK" >&2
  # HTA for the GPU machine's own PyTorch (no network there), in a tarball of its own:
  # HTA and the modules it imports, for that machine's Python (GPU_PYTHON, default 3.12;
  # build-and-test says which it has), without torch, numpy or HTA's notebook extras.
  local py="${GPU_PYTHON:-3.12}" pip="$ROOT/.venv-ref/bin/pip"
  [ -x "$pip" ] || pip="python3 -m pip"
  $pip download -q --no-deps -d "$STAGE/wheels" holistictraceanalysis==0.5.0 >&2 &&
    $pip download -q --no-deps --only-binary=:all: --python-version "$py" --platform manylinux2014_x86_64 \
      -d "$STAGE/wheels" pandas python-dateutil six pytz tzdata plotly narwhals packaging networkx pydot pyparsing >&2 &&
    tar -C "$ROOT/dist" -czf "$ROOT/dist/gpu-check-hta.tgz" gpu-check/wheels &&
    echo "gpu-check pack: HTA for Python $py, $(du -h "$ROOT/dist/gpu-check-hta.tgz" | cut -f1) in dist/gpu-check-hta.tgz" >&2 ||
    echo "gpu-check pack: HTA's wheels for Python $py could not be fetched; measure will run dpdoctor without HTA" >&2
}

# The GPU machine: the package unpacked into the repository root, the build's source path
# pointing here, and the library path holding the package's libraries and CUDA's.
unpack() {
  [ -f "$PACK" ] || { echo "gpu-check: no $PACK (run 'scripts/gpu-check.sh pack' on the build machine and bring it)" >&2; exit 2; }
  mkdir -p "$ROOT/dist"
  # gpu-check/* into dist/, the build tree into the repository root; with Python's tarfile
  # where this machine has no xz.
  if command -v xz >/dev/null; then
    tar -C "$ROOT/dist" -xJf "$PACK" --wildcards 'gpu-check/*' || exit 2
    tar -C "$ROOT" -xJf "$PACK" --exclude 'gpu-check/*' || exit 2
  else
    python3 - "$PACK" "$ROOT" <<'PY' || exit 2
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    for m in t.getmembers():
        t.extract(m, sys.argv[2] + "/dist" if m.name.startswith("gpu-check/") else sys.argv[2])
PY
  fi
  [ -f "$ROOT/dist/gpu-check-hta.tgz" ] && tar -C "$ROOT/dist" -xzf "$ROOT/dist/gpu-check-hta.tgz"
  local baked; baked="$(cat "$STAGE/source_dir")"
  if [ "$baked" != "$ROOT" ] && [ ! -e "$baked" ]; then mkdir -p "$(dirname "$baked")" && ln -s "$ROOT" "$baked"; fi
  local dirs="$STAGE/lib"
  for lib in libcudart.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcupti.so.13; do
    local path
    path="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
    [ -n "$path" ] || path="$(find -L /usr/local/cuda* /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/lib/python3* \
                                  -maxdepth 8 -name "$lib" -print -quit 2>/dev/null)"
    [ -n "$path" ] && dirs="$dirs:$(dirname "$path")"
  done
  export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  BUILD="$baked/build"
  # dpdoctor's probe finds dpbench by $DPBENCH (the build tree's link beside dpdoctor is
  # not packed).
  export DPBENCH="$BUILD/benchmarks/dpbench/dpbench"
  DPDOCTOR="$BUILD/diagnostics/dpdoctor"
}

build_and_test() {
  unpack
  say "## build-and-test $(date -u +%FT%TZ), commit $(cat "$STAGE/commit" 2>/dev/null)"
  say "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  say "- $(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1), pandas: $(python3 -c 'import pandas; print(pandas.__version__)' 2>/dev/null || echo 'not installed (pack with GPU_PYTHON set to this Python and carry dist/gpu-check-hta.tgz)')"
  step "test_cuda (CPU against CUDA, the CUDA backend's own tests)" "$OUT/tests.log" \
    timeout 240 "$BUILD/tests/test_cuda" --gtest_brief=1
  step "the whole suite (ctest -j 12)" "$OUT/tests.log" \
    timeout 330 ctest --test-dir "$BUILD" -j 12 --timeout 240 --output-on-failure
  grep -E "tests passed|tests failed" "$OUT/tests.log" | tail -1 | sed 's/^/  /' | tee -a "$summary"
}

measure() {
  unpack
  say "## measure $(date -u +%FT%TZ), commit $(cat "$STAGE/commit" 2>/dev/null)"
  local reports="$OUT/modes" common=(--devices=cuda --progress=none --steps=30 --warmup=5)
  mkdir -p "$reports"
  local -a runs=(
    "single-resnet18|--mode=single --model=resnet18 --batch=128"
    "dp-logical-resnet18|--mode=dp --gpus=2 --logical-gpus --model=resnet18 --batch=128"
    "ddp-gloo-2ranks-lenet|--mode=ddp --gpus=2 --device-map=same --backend=gloo --model=lenet --batch=256"
    "ddp-nccl-1rank-resnet18|--mode=ddp --gpus=1 --backend=nccl --model=resnet18 --batch=128"
    "mp-resnet18|--mode=mp --gpus=2 --logical-gpus --model=resnet18 --batch=128 --schedule=1f1b --micro-batches=4"
    "fsdp-gloo-2ranks-gpt2-tiny|--mode=fsdp --gpus=2 --device-map=same --backend=gloo --model=gpt2-tiny --data=synthetic --batch=8"
    "fsdp-nccl-1rank-gpt2|--mode=fsdp --gpus=1 --backend=nccl --model=gpt2 --data=synthetic --seq=256 --batch=8 --optimizer=adamw"
    "tp-gloo-2ranks-gpt2-tiny|--mode=tp --gpus=2 --device-map=same --backend=gloo --model=gpt2-tiny --data=synthetic --batch=8"
    "tp-nccl-1rank-gpt2|--mode=tp --gpus=1 --backend=nccl --model=gpt2 --data=synthetic --seq=256 --batch=8 --optimizer=adamw"
    "ddp-tp-gloo-4ranks-gpt2-tiny|--mode=ddp --tp=2 --gpus=4 --device-map=same --backend=gloo --model=gpt2-tiny --data=synthetic --batch=4"
  )
  for r in "${runs[@]}"; do
    local name="${r%%|*}" args="${r#*|}"
    for timing in auto cupti events off; do
      # shellcheck disable=SC2086
      step "$name --device-timing=$timing" "$OUT/modes.log" timeout 120 "$DPBENCH" $args "${common[@]}" \
        --device-timing=$timing --json="$reports/$name-$timing.json"
    done
  done
  # Each source as the report names it, and the collectors' cost: every run's median step
  # with cupti and with events against off (target: cupti within 3 %); DataParallel's
  # device split and the pipeline's stage events on each device's clock
  # (benchmarks/gpu_check/checks.py, tested in tests/tools/gpu_check_test.py).
  { python3 "$CHECKS" sources "$reports"; python3 "$CHECKS" splits "$reports"; } 2>&1 | tee -a "$summary"
  # CUPTI's kernel time against ncu's gpu__time_duration for the same kernel of the same
  # workload (the ResNet-18 step's longest kernel; ncu at the GPU's own clocks and caches,
  # as the run had them). Target: within 5 %.
  local kernel="$OUT/kernel.txt"
  python3 "$CHECKS" longest-kernel "$reports/single-resnet18-cupti.json" >"$kernel" 2>>"$OUT/modes.log" || true
  if [ -s "$kernel" ] && command -v ncu >/dev/null; then
    local name cupti_us
    name="$(sed -n 1p "$kernel")" cupti_us="$(sed -n 2p "$kernel")"
    for base in mangled demangled; do
      # shellcheck disable=SC2086
      timeout 100 ncu --clock-control none --cache-control none --kernel-name-base $base \
        -k "regex:^$(printf '%s' "$name" | sed 's/[][\.*^$+?(){}|/]/\\&/g')" --launch-skip 20 --launch-count 5 \
        --metrics gpu__time_duration.sum --csv "$DPBENCH" --mode=single --model=resnet18 --batch=128 \
        --devices=cuda --progress=none --steps=10 --warmup=2 --device-timing=off >"$OUT/ncu.csv" 2>>"$OUT/modes.log"
      grep -q gpu__time_duration "$OUT/ncu.csv" && break
    done
    python3 "$CHECKS" ncu "$OUT/ncu.csv" "$cupti_us" "$name" 2>&1 | tee -a "$summary"
    rm -f "$OUT/ncu.csv" "$kernel"
  else
    say "- [FAIL] CUPTI kernel time against ncu: $( [ -s "$kernel" ] && echo 'no ncu on PATH' || echo 'no kernel in the cupti run report')"
    rm -f "$kernel"
  fi
  # CUPTI's busy share, kernel count and kernel time against torch.profiler's on a
  # PyTorch ResNet-18 step (our collector loaded into that process). Targets: 2 %, equal.
  if [ -f "$BUILD/benchmarks/libdpb_cupti_probe.so" ]; then
    timeout 120 python3 "$ROOT/benchmarks/trace_analysis/cupti_vs_kineto.py" \
      --probe "$BUILD/benchmarks/libdpb_cupti_probe.so" 2>>"$OUT/modes.log" | tee -a "$summary"
  else
    say "- [FAIL] CUPTI against torch.profiler: no libdpb_cupti_probe.so in the package"
  fi
  tar -C "$OUT" -czf "$OUT/modes.tar.gz" modes && rm -rf "$reports"

  # The GPU trace corpus, recorded with this machine's PyTorch, then read by dpdoctor and
  # by HTA (from the carried wheels).
  local venv="$OUT/.venv"
  python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1
  if compgen -G "$STAGE/wheels/*.whl" >/dev/null; then
    step "HTA from the carried wheels" "$OUT/doctor.log" "$venv/bin/pip" install -q --no-index --no-deps "$STAGE"/wheels/*.whl
  else
    say "- [skip] HTA: no dist/gpu-check-hta.tgz carried (dpdoctor runs alone)"
  fi
  if step "GPU trace corpus (record_corpus.sh, this machine's PyTorch)" "$OUT/doctor.log" \
       env GPU_ONLY=1 PY="$venv/bin/python" timeout 200 "$ROOT/benchmarks/trace_analysis/record_corpus.sh"; then
    # shellcheck disable=SC2046
    tar -C "$ROOT/tests/data/traces" -czf "$OUT/corpus.tar.gz" $(cd "$ROOT/tests/data/traces" && compgen -G 'gpu-*') \
      hta_figures.json
    local d
    for d in $(compgen -G "$ROOT/tests/data/traces/gpu-*"); do
      step "dpdoctor $(basename "$d")" "$OUT/doctor.log" timeout 30 "$DPDOCTOR" --torch-trace "$d"
    done
  fi

  step "speed against PyTorch (compare_cuda.sh: eager, CUDA graph, torch.compile; fp32, tf32, bf16)" "$OUT/speed.log" \
    env DPBENCH="$DPBENCH" PYTHON="$venv/bin/python" REPEAT=1 STEPS=40 WARMUP=10 timeout 280 \
    "$ROOT/benchmarks/pytorch_reference/compare_cuda.sh" "$OUT/speed"
  [ -d "$OUT/speed" ] && { cat "$OUT"/speed/summary* >>"$OUT/speed.log" 2>/dev/null; rm -rf "$OUT/speed"; }
  # GPT-2 124M in bf16 at batch 16 x 1024 against PyTorch eager and torch.compile, with
  # each one's MFU (targets: >= 1.0x compile, MFU >= 35 %).
  step "GPT-2 speed against PyTorch (compare_gpt2.sh: gpt2 bf16 16 x 1024, eager and torch.compile)" \
    "$OUT/speed.log" env DPBENCH="$DPBENCH" PYTHON="$venv/bin/python" DEVICE=cuda PRECISION=bf16 REPEAT=1 WARMUP=5 \
    CASES="gpt2:16:1024:20" timeout 200 "$ROOT/benchmarks/pytorch_reference/compare_gpt2.sh"
  # GPT-2's attention fused by cuDNN (flash attention) against cuBLAS products that write
  # the probabilities out: tokens/s and peak memory of each (a GPU's step varies little).
  local attn
  for attn in cudnn cublas; do
    step "gpt2 bf16 16 x 1024, attention on $attn (DPB_CUDA_ATTENTION)" "$OUT/speed.log" \
      env DPB_CUDA_ATTENTION="$attn" timeout 120 "$DPBENCH" --mode=single --devices=cuda --precision=bf16 \
      --model=gpt2 --data=synthetic --batch=16 --seq=1024 --steps=20 --warmup=5 --optimizer=adamw --progress=none
  done
  rm -rf "$venv"
}

case "${1:-}" in
  pack) pack ;;
  build-and-test) build_and_test ;;
  measure) measure ;;
  *) echo "usage: $0 pack|build-and-test|measure  (see the top of this file)" >&2; exit 2 ;;
esac
