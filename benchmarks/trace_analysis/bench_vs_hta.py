#!/usr/bin/env python3
"""dpdoctor against Holistic Trace Analysis (HTA) 0.5.0 at what both do with a set of
Kineto traces: load them, the temporal breakdown and the communication/compute overlap.
Same traces, same machine, one run; alternated --repeat times; prints wall time and peak
memory (resident set of the whole process tree, sampled every 10 ms) of each, their
ratio, and the traces' uncompressed size. Targets: dpdoctor >= 10x faster, peak memory
<= the uncompressed size.

    PY="$(benchmarks/pytorch_reference/venv.sh)"
    "$PY" benchmarks/trace_analysis/bench_vs_hta.py                 # generated traces
    "$PY" benchmarks/trace_analysis/bench_vs_hta.py --traces DIR    # your own

Without --traces it writes traces shaped like a DDP job's on GPUs
(make_kineto_trace.py: --ranks x --steps x --kernels) to a temporary folder. HTA runs
as its users run it: TraceAnalysis(trace_dir) (which parses ranks in parallel
processes), get_temporal_breakdown, get_comm_comp_overlap. dpdoctor runs as
`dpdoctor --torch-trace DIR --json` (all its rules too). --json FILE writes the figures.
"""
import argparse
import glob
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HTA_RUN = """
import contextlib, io, logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
with contextlib.redirect_stdout(io.StringIO()):
    a = TraceAnalysis(trace_dir=sys.argv[1])
    a.get_temporal_breakdown(visualize=False)
    a.get_comm_comp_overlap(visualize=False)
"""


def tree_rss(pid):
    """Resident bytes of pid and its descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def measure(cmd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        peak = max(peak, tree_rss(p.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    if p.returncode not in (0, 1):  # dpdoctor exits 1 when it finds problems
        raise SystemExit(f"bench_vs_hta: {cmd[0]} failed ({p.returncode}): {err[-2000:]}")
    return wall, peak


def uncompressed_size(folder):
    total = 0
    for f in glob.glob(os.path.join(folder, "*.json")) + glob.glob(os.path.join(folder, "*.json.gz")):
        if f.endswith(".gz"):
            with gzip.open(f, "rb") as g:
                while chunk := g.read(1 << 20):
                    total += len(chunk)
        else:
            total += os.path.getsize(f)
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", help="a folder of Kineto traces (default: generate)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--kernels", type=int, default=500)
    p.add_argument("--gzip", action="store_true", help="generate gzipped traces")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dpdoctor", default=os.path.join(ROOT, "build/diagnostics/dpdoctor"))
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.traces
        if not folder:
            folder = os.path.join(tmp, "traces")
            gen = [sys.executable, os.path.join(ROOT, "benchmarks/trace_analysis/make_kineto_trace.py"),
                   "--ranks", str(a.ranks), "--steps", str(a.steps), "--kernels", str(a.kernels), "--out", folder]
            subprocess.run(gen + (["--gzip"] if a.gzip else []), check=True, stdout=subprocess.DEVNULL)
        size = uncompressed_size(folder)
        hta_script = os.path.join(tmp, "hta_run.py")
        with open(hta_script, "w") as f:
            f.write(HTA_RUN)
        runs = {"hta": [], "dpdoctor": []}
        for _ in range(a.repeat):
            runs["dpdoctor"].append(measure([a.dpdoctor, "--torch-trace", folder, "--json"]))
            runs["hta"].append(measure([sys.executable, hta_script, folder]))
    med = {k: (statistics.median(w for w, _ in v), max(m for _, m in v)) for k, v in runs.items()}
    speedup = med["hta"][0] / med["dpdoctor"][0]
    print(f"traces: {folder if a.traces else f'{a.ranks} ranks x {a.steps} steps x {a.kernels} kernels (generated)'}, "
          f"{size / 1e6:.1f} MB uncompressed; {platform.node()}, {os.cpu_count()} cores; median of {a.repeat}")
    print(f"{'tool':<10} {'wall s':>9} {'peak MB':>9}")
    for k in ("hta", "dpdoctor"):
        print(f"{k:<10} {med[k][0]:>9.2f} {med[k][1] / 1e6:>9.1f}")
    print(f"dpdoctor is {speedup:.1f}x faster (target >= 10x); its peak memory is "
          f"{med['dpdoctor'][1] / size:.2f}x the uncompressed traces (target <= 1x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"uncompressed_bytes": size, "repeat": a.repeat, "speedup": speedup,
                       "tools": {k: {"wall_s": v[0], "peak_rss_bytes": v[1]} for k, v in med.items()}}, f, indent=1)
    sys.exit(0)


if __name__ == "__main__":
    main()
