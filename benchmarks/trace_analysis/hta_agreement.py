#!/usr/bin/env python3
"""dpdoctor's temporal breakdown and overlap against Holistic Trace Analysis (HTA) on the
same traces: every folder of the project's corpus (tests/data/traces) and any folders
given, per rank, in points of the window. Target: within 1 point.

    PY="$(benchmarks/pytorch_reference/venv.sh)"
    "$PY" benchmarks/trace_analysis/hta_agreement.py [--record] [DIR ...]

HTA's shares: idle/compute/non-compute of get_temporal_breakdown (non-compute =
dpdoctor's communication + memory), overlap = comp_comm_overlap_pctg of
get_comm_comp_overlap. A folder without GPU activity has no HTA figures (HTA's breakdown
is of GPU kernels); it is listed as such. --record writes HTA's figures beside each
corpus case in tests/data/traces/hta_figures.json (outside the case folders, which
hold only traces). Exit 1 if any figure is
more than --tolerance points apart.
"""
import argparse
import contextlib
import glob
import io
import json
import logging
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def hta_figures(folder):
    """{rank: {idle, compute, noncompute, overlap}} in percent, or (None, why)."""
    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            a = TraceAnalysis(trace_dir=folder)
            tb = a.get_temporal_breakdown(visualize=False)
            ov = a.get_comm_comp_overlap(visualize=False)
    except Exception as ex:  # HTA's own failure on this folder: reported, not ours to fix
        return None, f"HTA: {type(ex).__name__}: {ex}"
    out = {}
    for _, row in tb.iterrows():
        out[int(row["rank"])] = {"idle": float(row["idle_time_pctg"]), "compute": float(row["compute_time_pctg"]),
                                 "noncompute": float(row["non_compute_time_pctg"]), "overlap": None}
    for _, row in ov.iterrows():
        if int(row["rank"]) in out:
            out[int(row["rank"])]["overlap"] = float(row["comp_comm_overlap_pctg"])
    return out, None


def dpdoctor_figures(dpdoctor, folder):
    p = subprocess.run([dpdoctor, "--torch-trace", folder, "--json"], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"hta_agreement: dpdoctor failed on {folder}: {p.stderr.strip()}")
    out = {}
    doc = json.loads(p.stdout)
    # HTA's window is the kernel span; dpdoctor's is the profiled steps where a trace has
    # them, with the kernel span's breakdown beside.
    for i, r in enumerate(doc.get("ranks_kernel_span") or doc["ranks"]):
        pct = lambda v: None if v is None else 100.0 * v
        out[r["rank"] if r["rank"] is not None else i] = {
            "idle": pct(r["idle_share"]), "compute": pct(r["compute_share"]),
            "noncompute": None if r["comm_share"] is None else pct(r["comm_share"] + (r["memory_share"] or 0)),
            "overlap": pct(r["overlap"])}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="*")
    p.add_argument("--dpdoctor", default=os.path.join(ROOT, "build/diagnostics/dpdoctor"))
    p.add_argument("--tolerance", type=float, default=1.0, help="points")
    p.add_argument("--record", action="store_true", help="write HTA's figures to tests/data/traces/hta_figures.json")
    a = p.parse_args()
    # The cases recorded here (public/ holds other people's jobs: real_traces.py covers them).
    corpus = sorted(d for d in glob.glob(os.path.join(ROOT, "tests/data/traces/*"))
                    if os.path.isdir(d) and os.path.basename(d) != "public")
    worst, bad = 0.0, 0
    recorded = {}
    print(f"{'traces':<28} {'rank':>4} {'figure':<10} {'HTA':>8} {'dpdoctor':>9} {'diff':>6}")
    for folder in corpus + a.dirs:
        hta, why = hta_figures(folder)
        ours = dpdoctor_figures(a.dpdoctor, folder)
        name = os.path.relpath(folder, ROOT) if folder.startswith(ROOT) else folder
        if folder in corpus:
            recorded[os.path.basename(folder)] = {"ranks": hta, "none_because": why}
        if hta is None:
            print(f"{name:<28} {'-':>4} {'-':<10} {'-':>8} {'-':>9} {'-':>6}  no HTA figures ({why.splitlines()[0][:60]});"
                  f" dpdoctor: {'no device activity' if not ours else f'{len(ours)} rank(s)'}")
            continue
        for rank in sorted(hta):
            for k in ("idle", "compute", "noncompute", "overlap"):
                h, o = hta[rank][k], ours.get(rank, {}).get(k)
                if h is None and o is None:
                    continue
                d = None if h is None or o is None else abs(h - o)
                if d is None or d > a.tolerance:
                    bad += 1
                worst = max(worst, d or 0)
                print(f"{name:<28} {rank:>4} {k:<10} {h if h is not None else float('nan'):>8.2f} "
                      f"{o if o is not None else float('nan'):>9.2f} {d if d is not None else float('nan'):>6.2f}"
                      f"{'  <- over ' + str(a.tolerance) if d is None or d > a.tolerance else ''}")
    if a.record:
        with open(os.path.join(ROOT, "tests/data/traces/hta_figures.json"), "w") as f:
            json.dump({"hta": "holistictraceanalysis 0.5.0", "units": "percent of the window", "cases": recorded}, f,
                      indent=1, sort_keys=True)
            f.write("\n")
    print(f"worst difference {worst:.2f} points; {bad} figure(s) over {a.tolerance} point(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
