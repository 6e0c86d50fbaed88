#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader of outside data (tests/fuzz/targets.cpp), for
# longer than the test suite's replay does:
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (default: 600 seconds, every target)
# Builds the libFuzzer binaries in build-fuzz/ with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, the code under test instrumented for coverage
# (-DDPB_FUZZ=ON). Runs each target for SECONDS from its seeds (tests/fuzz/corpus/TARGET),
# then merges the inputs that reached new code into those seeds (libFuzzer's -merge=1
# with -use_counters=0: only inputs that cover edges no seed covers, so the seeds grow by
# tens, not thousands), so the test suite's replay starts from them. What each
# target covered, and anything it found, goes to out/fuzz/summary.md; an input that made
# a target fail is kept as out/fuzz/TARGET-crash-* (copy it under the target's
# crashers/ once fixed). Exit status 1 when any target failed.
set -euo pipefail
DPB_EXTRA_PACKAGES="clang" DPB_SETUP_NO_BUILD=1 source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

seconds="${1:-600}"
shift || true
corpus="$DPB_ROOT/tests/fuzz/corpus"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=($(sed -n 's/^set(DPB_FUZZ_TARGETS \(.*\))$/\1/p' "$DPB_ROOT/tests/fuzz/CMakeLists.txt"))
fi
out="${DPB_FUZZ_OUT:-$DPB_ROOT/out/fuzz}"
mkdir -p "$out"

DPB_BUILD="$DPB_ROOT/build-fuzz" CC=clang CXX=clang++ \
  DPB_CMAKE_ARGS="-DDPB_CUDA=OFF -DDPB_BUILD_BENCHMARKS=OFF -DDPB_FUZZ=ON -DDPB_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS_RELEASE=-O1" \
  dpb_build_targets "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
summary="$out/summary.md"
{
  echo "# Coverage-guided fuzzing, $(date -u +%Y-%m-%d)"
  echo
  echo "Commit $(git -C "$DPB_ROOT" rev-parse --short=12 HEAD); $(clang --version | head -1);" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), ${seconds} s per target."
  echo
  echo "| target | runs | runs/s | edges covered | of instrumented | features | seeds before | after merge | found |"
  echo "|---|---|---|---|---|---|---|---|---|"
} > "$summary"

failed=0
for t in "${targets[@]}"; do
  bin="$DPB_ROOT/build-fuzz/tests/fuzz/fuzz_$t"
  [ -d "$corpus/$t" ] || { echo "fuzz: no seed folder $corpus/$t" >&2; exit 2; }
  work="$(mktemp -d "${TMPDIR:-/tmp}/dpb_fuzz_$t.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  before=$(find "$corpus/$t" -type f | wc -l)
  log="$out/$t.log"
  echo "fuzz: $t for ${seconds} s" >&2
  rc=0
  (cd "$work" && "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
      -artifact_prefix="$out/$t-" "$work" "$corpus/$t") > "$log" 2>&1 || rc=$?
  # Keep only the inputs that reach code the seeds did not.
  "$bin" -merge=1 -use_counters=0 -rss_limit_mb=2048 -timeout=30 "$corpus/$t" "$work" > "$out/$t.merge.log" 2>&1 || true
  rm -rf "$work"
  trap - EXIT
  after=$(find "$corpus/$t" -type f | wc -l)
  total=$(sed -n 's/^INFO: Loaded 1 modules *(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -1)
  last=$(grep -E '^#[0-9]+' "$log" | grep -v -- '-merge' | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\)/\1/p' "$log" | head -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\)/\1/p' "$log" | head -1)
  found="none"
  if [ "$rc" -ne 0 ]; then
    failed=1
    found="exit $rc: $(ls "$out" | grep "^$t-" | tr '\n' ' ')$(grep -m1 -E 'ERROR: |runtime error|fuzz_driver|escaped' "$log" | cut -c1-160)"
  fi
  pct="n/a"
  [ -n "$total" ] && [ -n "$cov" ] && pct="$(awk -v c="$cov" -v n="$total" 'BEGIN{printf "%.1f %%", 100*c/n}')"
  echo "| $t | ${runs:-?} | ${rate:-?} | ${cov:-?} | ${total:-?} ($pct) | ${ft:-?} | $before | $after | $found |" >> "$summary"
done
cat "$summary"
exit "$failed"
