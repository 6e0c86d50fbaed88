#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test with CTest.
# CUDA tests skip, with the reason, on machines without a GPU.
# Then the sanitizer stages, each in a build directory of its own with the non-CUDA code:
#   build-asan: AddressSanitizer + UndefinedBehaviorSanitizer, the CPU suite (all but the
#               timing-judged scenario suite; that build has no benchmarks);
#   build-tsan: ThreadSanitizer over every test that starts a thread or a process (Gloo and
#               its queue, the stores, the launcher, the loader's workers, the device
#               workers, the reducer, FSDP, tensor parallelism, the trace reader's pool);
#               the ones left out, and why, are listed where the stage runs.
# DPB_SANITIZERS=0 skips them (a quick local run); arguments go to every ctest run.
set -euo pipefail
# The HTML report test renders pages in headless Chromium.
DPB_EXTRA_PACKAGES="chromium"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
jobs="${DPB_JOBS:-$(nproc)}"
(cd "$DPB_BUILD" && ctest --output-on-failure --parallel "$jobs" "$@")

# Rounding that depends on the processor: the parallel-equivalence and model tests again
# with oneDNN and our own kernels (engine/backend/cpu/simd.h) held to AVX2, so that a
# tolerance that holds only on AVX-512 fails on every machine (oneDNN's AVX2 convolutions
# reduce in another order at each mini-batch size).
echo "test: parallel equivalence and models with oneDNN and our kernels held to AVX2" >&2
(cd "$DPB_BUILD" && ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 DPB_MAX_CPU_ISA=avx2 \
  ctest --output-on-failure --parallel "$jobs" -R "^(Devices/|Modes/|Models/)" "$@")
[ "${DPB_SANITIZERS:-1}" = "0" ] && exit 0

# Each name a sanitizer stage selects or leaves out must match tests that stage's build
# has: a filter that matches nothing (a test renamed, or living in a binary the stage
# does not build) fails the stage instead of silently running less.
check_filter() {
  local dir="$1" pattern n
  shift
  for pattern in "$@"; do
    n=$(cd "$dir" && ctest -N -R "^($pattern)" | sed -n 's/^Total Tests: //p')
    if [ "${n:-0}" -eq 0 ]; then
      echo "test: the filter '$pattern' matches no test in $(basename "$dir")" >&2
      return 1
    fi
  done
}

# -O1: the sanitizers' usual level, quick to build, fast enough to run; no debug info
# (symbolized frames need only symbols). Sanitizer reports fail the test that caused them.
sanitizer_build() {
  DPB_BUILD="$DPB_ROOT/$1" \
    DPB_CMAKE_ARGS="-DDPB_CUDA=OFF -DDPB_BUILD_BENCHMARKS=OFF -DDPB_SANITIZE=$2 -DCMAKE_CXX_FLAGS_RELEASE=-O1" \
    dpb_build_targets "${@:3}"
}

echo "test: AddressSanitizer + UndefinedBehaviorSanitizer (build-asan)" >&2
sanitizer_build build-asan address,undefined
# Scenarios/ and ProveScenario judge what dpbench runs measured (ProveScenario: a fix's
# gain against its prediction); instrumented code measures something else. (This build
# has no benchmarks, so no smoke runs.)
asan_skip=('Scenarios/' 'ProveScenario\.')
check_filter "$DPB_ROOT/build-asan" "${asan_skip[@]}"
(cd "$DPB_ROOT/build-asan" &&
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --output-on-failure --parallel "$jobs" -E "^($(IFS='|'; echo "${asan_skip[*]}"))" "$@")

echo "test: ThreadSanitizer (build-tsan)" >&2
sanitizer_build build-tsan thread test_comm test_parallel test_train test_backend test_tools test_core \
  test_doctor_rules
# Every test that starts a thread or a process, but:
#   MultiNode, StartUp: they time signals and start-up against the wall clock (a launcher
#     killed 2 s in, its ranks checked 3 s later; a link cut and the job's end awaited
#     within --timeout + 5 s), and network namespaces' nodes pin their cores; under TSan's
#     5-15x slowdown those windows would measure the sanitizer, and the same code paths
#     (store, launcher, Gloo's connect) run here through DpbenchRanks and Store.
#   Scenarios/ (test_scenarios): each runs dpbench probes and judges what they measured
#     (busy shares, waits, E(N)); instrumented code measures something else.
#   DpbenchSimulate, DpbenchWinograd, DpbenchTrace, LayerProfile: one process, one training
#     thread (the simulator is single-threaded; the rest run --mode=single).
#   TensorParallel.DifferentModelsOnTwoRanksNameTheParameter: it expects the mismatch to be
#     named before an 800 ms heartbeat expires; slowed down, the heartbeat names the rank
#     first (the same check runs without TSan, and Fsdp's twin of it runs here).
#   TraceCorpus.EveryVerdictFollowsItsBudget, EveryPublicTraceIsReadGroupedAndAccountedFor,
#     ReplayingWithNothingCutGivesTheMeasuredSteps: each reads all 33 public traces in one test, at or past ctest's 60 s limit under TSan; the reader's thread pool runs here in the
#     other TraceCorpus and TorchTrace tests.
tsan_tests=(Store GlooGroup 'Ranks/' Ddp 'Models/DdpEqualsSingle' DataLoader CpuContext DataParallel Pipeline
            DpbenchRanks ShmAllreduce StoreBind Fsdp TensorParallel SyncBn Strategies 'Models/Strategies' Trainer
            Gpt2FsdpMatchesPyTorchFsdp2 Gpt2TpMatchesPyTorchTensorParallel DpbenchDdp DpbenchFsdp DpbenchTp
            DpbenchCli DpbenchSweep Process TraceCorpus TorchTrace)
check_filter "$DPB_ROOT/build-tsan" "${tsan_tests[@]}"
(cd "$DPB_ROOT/build-tsan" &&
  TSAN_OPTIONS="suppressions=$DPB_ROOT/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1" \
  OMP_NUM_THREADS=1 \
  ctest --output-on-failure --parallel "$jobs" -R "^($(IFS='|'; echo "${tsan_tests[*]}"))" \
    -E "^(TensorParallel\.DifferentModelsOnTwoRanksNameTheParameter|TraceCorpus\.(EveryVerdictFollowsItsBudget|EveryPublicTraceIsReadGroupedAndAccountedFor|ReplayingWithNothingCutGivesTheMeasuredSteps))$" "$@")
