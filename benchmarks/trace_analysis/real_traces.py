#!/usr/bin/env python3
"""dpdoctor on the real GPU traces of public jobs (tests/data/traces/public), beside
Holistic Trace Analysis (HTA) 0.5.0: per job (or run) the files and their grouping,
dpdoctor's verdict, each rank's idle/compute/communication share and overlap with HTA's
figures beside them where HTA runs on the trace (and why not where it does not), and the
time and peak memory each takes on the same files, against the files' uncompressed size.

    PY="$(benchmarks/pytorch_reference/venv.sh)"
    "$PY" benchmarks/trace_analysis/real_traces.py --md reports/results/real-traces-DATE.md \\
        --json reports/results/real-traces-DATE.json

dpdoctor runs once per job, on that job's files, as `dpdoctor --torch-trace FILE... --json`
(grouping and every rule included). HTA runs as its users run it on a folder holding the
job's files (its ranks): TraceAnalysis(trace_dir), get_temporal_breakdown,
get_comm_comp_overlap, alternating the two tools --repeat times (medians). HTA's peak memory
is the resident set of its process tree (it parses ranks in child processes), sampled
every 10 ms (bench_vs_hta.measure); dpdoctor's the kernel's exact maximum for its one
process, beside that of the same process on a one-kernel trace (code and buffers). HTA's "non-compute"
is dpdoctor's communication + memory; its overlap is comp_comm_overlap_pctg.
"""
import argparse
import datetime
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_vs_hta import HTA_RUN, measure  # noqa: E402
from hta_agreement import hta_figures  # noqa: E402


def measure_one(cmd):
    """Wall time and the exact peak resident set of one process (dpdoctor: threads, no
    children), from the kernel's accounting rather than sampling. /usr/bin/time starts it:
    a child forked from this Python (which holds HTA's data frames) would inherit the
    parent's peak in its own."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"real_traces: {cmd} failed ({p.returncode}): {p.stderr[-500:]}")
    return wall, int(p.stderr.strip().splitlines()[-1]) * 1024


def uncompressed(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))


def dpdoctor_json(dpdoctor, files):
    p = subprocess.run([dpdoctor, "--torch-trace", *files, "--json"], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"real_traces: dpdoctor failed on {files}: {p.stderr.strip()}")
    doc = json.loads(p.stdout)
    return doc["jobs"] if doc["schema"] == "dpdoctor.jobs/1" else [doc]


def verdict(job):
    warn = [f["id"] for f in job["findings"] if f["severity"] != "info"]
    info = [f["id"] for f in job["findings"] if f["severity"] == "info"]
    if not warn:
        return "healthy" + (f" (advice: {', '.join(info)})" if info else "")
    rest = [w for w in warn if w != job["primary"]]
    return f"**{job['primary']}**" + (f" + {', '.join(rest)}" if rest else "")


def pct(v):
    return "–" if v is None else f"{100 * v:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpdoctor", default=os.path.join(ROOT, "build/diagnostics/dpdoctor"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests/data/traces/public"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--md", help="write the tables as markdown here")
    ap.add_argument("--json", help="write every figure as JSON here")
    a = ap.parse_args()
    # The process alone (code, libraries, buffers): dpdoctor on a one-kernel trace.
    with tempfile.NamedTemporaryFile("w", suffix=".json") as tiny:
        json.dump({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7}]}, tiny)
        tiny.flush()
        baseline = statistics.median(measure_one([a.dpdoctor, "--torch-trace", tiny.name, "--json"])[1] for _ in range(3))
    rows = []
    for folder in sorted(d for d in glob.glob(os.path.join(a.corpus, "*")) if os.path.isdir(d)):
        if os.path.basename(folder) == "LICENSES":
            continue
        for job in dpdoctor_json(a.dpdoctor, [folder]):
            files = [f["path"] for f in job["job"]["files"]]
            size = sum(uncompressed(f) for f in files)
            with tempfile.TemporaryDirectory() as tmp:
                for f in files:
                    os.symlink(os.path.abspath(f), os.path.join(tmp, os.path.basename(f)))
                hta, why = hta_figures(tmp)
                # HTA rounds times with fractions of a microsecond to whole ones (ts up, end
                # down: each kernel loses up to 2 us); its figures without that rounding too.
                os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
                hta_exact, _ = hta_figures(tmp)
                del os.environ["HTA_DISABLE_NS_ROUNDING"]
                ours, theirs = [], []
                for _ in range(a.repeat):
                    ours.append(measure_one([a.dpdoctor, "--torch-trace", *files, "--json"]))
                    if hta is not None:
                        theirs.append(measure([sys.executable, "-c", HTA_RUN, tmp]))
            again = dpdoctor_json(a.dpdoctor, files)
            assert len(again) == 1 and again[0]["primary"] == job["primary"], f"{files}: not one job on its own"
            ranks = []
            # Against HTA: the breakdown over HTA's window (the kernel span) where the
            # diagnosis's own window is the profiled steps.
            for i, r in enumerate(job.get("ranks_kernel_span") or job["ranks"]):
                rank = r["rank"] if r["rank"] is not None else i
                h = (hta or {}).get(rank)
                ranks.append({"rank": r["rank"], "device": r["device"], "window_s": r["window_s"],
                              "idle": r["idle_share"], "compute": r["compute_share"],
                              "comm": r["comm_share"], "memory": r["memory_share"], "overlap": r["overlap"],
                              "hta": h, "hta_without_rounding": (hta_exact or {}).get(rank)})
            rows.append({
                "folder": os.path.basename(folder),
                "files": [os.path.basename(f) for f in files],
                "grouping": f"{job['job']['kind']}: {job['job']['reason']}",
                "verdict": verdict(job), "primary": job["primary"],
                "findings": [{"id": f["id"], "severity": f["severity"], "title": f["title"]} for f in job["findings"]],
                "ranks": ranks, "hta_none_because": why,
                "uncompressed_bytes": size,
                "dpdoctor_s": statistics.median(t for t, _ in ours),
                "dpdoctor_peak_bytes": statistics.median(m for _, m in ours),
                "hta_s": statistics.median(t for t, _ in theirs) if theirs else None,
                "hta_peak_bytes": statistics.median(m for _, m in theirs) if theirs else None,
            })
            print(f"{rows[-1]['folder']:<42} {len(files)} file(s) {rows[-1]['verdict']:<60} "
                  f"dpdoctor {rows[-1]['dpdoctor_s']:.2f} s  HTA "
                  f"{'-' if rows[-1]['hta_s'] is None else format(rows[-1]['hta_s'], '.2f') + ' s'}", flush=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    try:
        with open("/proc/cpuinfo") as f:
            machine = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name")) + f", {os.cpu_count()} cores"
    except (OSError, StopIteration):
        pass
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "machine": machine, "hta": "holistictraceanalysis 0.5.0",
                       "repeat": a.repeat, "dpdoctor_baseline_peak_bytes": baseline, "jobs": rows}, f, indent=1)
            f.write("\n")
    if a.md:
        write_md(a.md, rows, machine, a.repeat, baseline)


def write_md(path, rows, machine, repeat, baseline):
    out = []
    out.append("| folder | files | grouping | dpdoctor's verdict |")
    out.append("|---|---|---|---|")
    for r in rows:
        out.append(f"| `{r['folder']}` | {', '.join('`' + f + '`' for f in r['files'])} | {r['grouping']} | {r['verdict']} |")
    out.append("")
    out.append("Per rank, percent of the window (HTA's in brackets where it runs; HTA's non-compute is "
               "communication + memory; where HTA's rounding of times to whole microseconds moves its figure by "
               "0.3 points or more, its figure with HTA_DISABLE_NS_ROUNDING=1 too):")
    out.append("")
    out.append("| folder | file / rank | window | idle | compute | comm + memory | overlap |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        for k in r["ranks"]:
            h = k["hta"]
            who = f"rank {k['rank']}" if k["rank"] is not None else r["files"][0]
            noncompute = None if k["comm"] is None else k["comm"] + (k["memory"] or 0)
            x = k["hta_without_rounding"]
            def both(ours, key):
                theirs = "" if not h or h.get(key) is None or h[key] != h[key] else f" ({h[key]:.1f}"
                if theirs and x and x.get(key) is not None and abs(x[key] - h[key]) >= 0.3:
                    theirs += f"; {x[key]:.1f} unrounded"
                return (pct(ours) if ours is not None else "–") + (theirs + ")" if theirs else "")
            out.append(f"| `{r['folder']}` | {who} | {k['window_s'] * 1e3:.1f} ms | {both(k['idle'], 'idle')} | "
                       f"{both(k['compute'], 'compute')} | {both(noncompute, 'noncompute')} | {both(k['overlap'], 'overlap')} |")
    out.append("")
    out.append("Where HTA has no figures, why (its own error on the trace):")
    out.append("")
    for r in rows:
        if r["hta_none_because"]:
            out.append(f"- `{r['folder']}` ({', '.join(r['files'])}): {r['hta_none_because'].splitlines()[0][:200]}")
    out.append("")
    out.append(f"Time and peak memory on the same files ({machine}; medians of {repeat} alternated runs; peak: "
               f"dpdoctor's exact maximum resident set, and in brackets what is above that of its process on a "
               f"one-kernel trace ({baseline / 2**20:.1f} MiB: code, libraries, buffers); HTA's process tree, "
               f"sampled every 10 ms):")
    out.append("")
    out.append("| folder | files | uncompressed | dpdoctor | HTA | speed-up | dpdoctor peak (above its own) | HTA peak |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        hta_s = "–" if r["hta_s"] is None else f"{r['hta_s']:.2f} s"
        ratio = "–" if r["hta_s"] is None else f"{r['hta_s'] / r['dpdoctor_s']:.0f}x"
        hta_m = "–" if r["hta_peak_bytes"] is None else f"{r['hta_peak_bytes'] / 2**20:.0f} MiB"
        out.append(f"| `{r['folder']}` | {len(r['files'])} | {r['uncompressed_bytes'] / 2**20:.1f} MiB | "
                   f"{r['dpdoctor_s']:.3f} s | {hta_s} | {ratio} | {r['dpdoctor_peak_bytes'] / 2**20:.1f} MiB "
                   f"({max(0, r['dpdoctor_peak_bytes'] - baseline) / 2**20:.1f} MiB) | {hta_m} |")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
