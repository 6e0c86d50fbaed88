#!/usr/bin/env bash
# dpbench's Gloo all-reduce against torch.distributed.all_reduce on gloo, same ranks,
# sizes, warm-up and iterations, runs alternating (REPEAT times, medians), with the
# machine's memcpy bandwidth (bench_collectives) as the ceiling for moving bytes.
#
#   benchmarks/pytorch_reference/compare_collectives.sh [OUT_DIR]
#
# Settings (environment): RANKS (2), MIN (1K), MAX (64M), FACTOR (4), ITERS (20),
# WARMUP (3), REPEAT (5), DPBENCH, BENCH_COLLECTIVES, PYTHON (Debian's /usr/bin/python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$here/../../build"
DPBENCH="${DPBENCH:-$build/benchmarks/dpbench/dpbench}"
BENCH_COLLECTIVES="${BENCH_COLLECTIVES:-$build/benchmarks/micro/bench_collectives}"
PYTHON="${PYTHON:-/usr/bin/python3}"
RANKS="${RANKS:-2}" MIN="${MIN:-1K}" MAX="${MAX:-64M}" FACTOR="${FACTOR:-4}"
ITERS="${ITERS:-20}" WARMUP="${WARMUP:-3}" REPEAT="${REPEAT:-5}"
out="${1:-out/compare_collectives}"
mkdir -p "$out"

for r in $(seq "$REPEAT"); do
  $DPBENCH --bench=collectives --gpus="$RANKS" --ops=allreduce -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" \
    --warmup="$WARMUP" --threads=1 --json="$out/dpbench_$r.json" > /dev/null 2>&1
  "$PYTHON" "$here/collectives.py" --ranks "$RANKS" --ops allreduce -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" \
    -w "$WARMUP" --json "$out/torch_$r.json" > /dev/null 2>&1
done
"$BENCH_COLLECTIVES" --benchmark_filter=memcpy --benchmark_min_time=0.2 --benchmark_format=json \
  > "$out/memcpy.json" 2>/dev/null

"$PYTHON" - "$out" "$RANKS" <<'EOF'
import glob, json, os, statistics, sys
out, ranks = sys.argv[1], int(sys.argv[2])
def series(pattern, key):
    by = {}
    for f in glob.glob(os.path.join(out, pattern)):
        d = json.load(open(f))
        for r in d["results"]:
            by.setdefault(r["bytes"], []).append(r[key])
    return {b: statistics.median(v) for b, v in by.items()}
ours, theirs = series("dpbench_*.json", "busbw_gbps"), series("torch_*.json", "busbw_gbps")
mem = {b["name"].split("/")[1]: b["bytes_per_second"] / 1e9
       for b in json.load(open(os.path.join(out, "memcpy.json")))["benchmarks"]}
rows = []
print(f"all-reduce, {ranks} ranks, gloo; busbw GB/s, median of runs")
print("| size | dpbench | torch.distributed | ratio | memcpy |")
print("| ---: | ---: | ---: | ---: | ---: |")
for b in sorted(ours):
    t = theirs.get(b)
    m = mem.get(str(b))
    rows.append({"bytes": b, "dpbench_busbw_gbps": ours[b], "torch_busbw_gbps": t,
                 "ratio": ours[b] / t if t else None, "memcpy_gbps": m})
    print(f"| {b} | {ours[b]:.3f} | {t:.3f} | {ours[b] / t:.2f}x | {m if m is None else round(m, 1)} |")
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
