#!/usr/bin/env python3
"""The checks scripts/gpu-check.sh makes on what the GPU runs wrote, each a function that
returns the summary's lines ("- [pass] ..." / "- [FAIL] ..."), so that they are tested
here on reports without a GPU (tests/tools/gpu_check_test.py).

    checks.py sources DIR            each run's timing source and the collectors' cost:
                                     DIR holds NAME-{auto,cupti,events,off}.json
    checks.py splits DIR             DataParallel's device split and the pipeline's stage
                                     events, from every report in DIR
    checks.py longest-kernel REPORT  the name and median time (us) of the step's longest
                                     kernel in a CUPTI run's timeline (two lines)
    checks.py ncu CSV CUPTI_US NAME  that kernel's time by CUPTI against ncu's
"""
import csv
import glob
import json
import os
import statistics
import sys

# What --device-timing=T must name as the report's timeline source.
WANT = {"auto": ("cupti", "cuda-events"), "cupti": ("cupti",), "events": ("cuda-events",), "off": ("host",)}
CUPTI_COST = 0.03  # CUPTI's step against off: at most 3 % longer
NCU_WITHIN = 0.05  # CUPTI's kernel time within 5 % of ncu's


def mark(ok):
    return "pass" if ok else "FAIL"


def first_run(path):
    """The first run of a report, or None when it cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)["runs"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def sources(directory):
    """Per run name: the source each --device-timing named, and cupti's and events' cost
    in step time against off."""
    lines = []
    names = sorted({os.path.basename(p).rsplit("-", 1)[0] for p in glob.glob(os.path.join(directory, "*.json"))})
    for name in names:
        med, src = {}, {}
        for t in WANT:
            run = first_run(os.path.join(directory, f"{name}-{t}.json"))
            if run is None:
                continue
            try:
                med[t] = run["step_time_s"]["median"]
            except (KeyError, TypeError):
                continue
            src[t] = (run.get("timeline") or {}).get("source")
        wrong = [f"{t}: {src[t]}" for t in src if src[t] not in WANT[t]]
        cost = {t: med[t] / med["off"] - 1 for t in ("cupti", "events") if t in med and med.get("off")}
        ok = not wrong and len(src) == len(WANT) and cost.get("cupti", 1) <= CUPTI_COST
        missing = [t for t in WANT if t not in src]
        lines.append(f"- [{mark(ok)}] {name}: sources {src}; step vs off: "
                     + ", ".join(f"{t} {c:+.1%}" for t, c in cost.items())
                     + (f"; wrong source {wrong}" if wrong else "")
                     + (f"; no report for {missing}" if missing else ""))
    return lines


def splits(directory):
    """DataParallel's split on the primary (its replica's work against its own, within the
    step) and the pipeline's stage events (every stage busy some of the step, the bubble
    within [theory / 2, 1))."""
    lines = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        run = first_run(path)
        if run is None:
            continue
        tag = os.path.basename(path)[:-5]
        step = (run.get("step_time_s") or {}).get("median")
        if run.get("dp"):
            only, replica = run["dp"].get("primary_only_s"), run["dp"].get("primary_replica_s")
            ok = (only is not None and replica is not None and step is not None and replica > 0
                  and only + replica <= step * 1.05)
            lines.append(f"- [{mark(ok)}] {tag}: the primary's own work {only}, its replica's {replica}, step {step} s")
        if run.get("pipeline"):
            b = run["pipeline"].get("bubble") or {}
            busy = [1 - s["idle_share"] for s in run.get("stages", []) if s.get("idle_share") is not None]
            theory, measured = b.get("theory"), b.get("measured")
            ok = (bool(busy) and all(0 < x <= 1 for x in busy) and theory is not None and measured is not None
                  and theory / 2 <= measured < 1)
            lines.append(f"- [{mark(ok)}] {tag}: stages busy {[round(x, 3) for x in busy]}, bubble {measured} "
                         f"(theory {theory})")
    return lines


def longest_kernel(report):
    """(name, median microseconds) of the kernel with the most time on the GPU streams of a
    report's timeline; None without one."""
    run = first_run(report)
    intervals = ((run or {}).get("timeline") or {}).get("intervals") or []
    times = {}
    for i in intervals:
        if str(i.get("lane", "")).startswith("gpu stream") and i.get("cat") == "compute":
            times.setdefault(i["name"], []).append(i["end_s"] - i["begin_s"])
    if not times:
        return None
    name = max(times, key=lambda n: sum(times[n]))
    return name, statistics.median(times[name]) * 1e6


def ncu_time_us(csv_path):
    """The median gpu__time_duration of the launches ncu profiled (us), and their count."""
    with open(csv_path) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        return None, 0
    # The metric's row names it as asked: gpu__time_duration.sum.
    head, body = rows[0], [r for r in rows[1:] if any(c.startswith("gpu__time_duration") for c in r)]
    unit, value = head.index("Metric Unit"), head.index("Metric Value")
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
    if not body:
        return None, 0
    return statistics.median(float(r[value].replace(",", "")) * scale[r[unit]] for r in body), len(body)


def ncu_compare(csv_path, cupti_us, name):
    ncu, launches = ncu_time_us(csv_path)
    ok = ncu is not None and abs(cupti_us / ncu - 1) <= NCU_WITHIN
    return [f"- [{mark(ok)}] CUPTI kernel time against ncu (target 5 %): {name[:60]}: CUPTI {cupti_us:.1f} us, "
            + (f"ncu {ncu:.1f} us ({cupti_us / ncu - 1:+.1%}, {launches} launches)" if ncu
               else "ncu profiled no launch of it")]


def main(argv):
    if len(argv) >= 2 and argv[0] == "sources":
        lines = sources(argv[1])
    elif len(argv) >= 2 and argv[0] == "splits":
        lines = splits(argv[1])
    elif len(argv) >= 2 and argv[0] == "longest-kernel":
        found = longest_kernel(argv[1])
        if found is None:
            print(f"checks.py: no GPU kernel in the timeline of {argv[1]}", file=sys.stderr)
            return 1
        lines = [found[0], f"{found[1]}"]
    elif len(argv) >= 4 and argv[0] == "ncu":
        lines = ncu_compare(argv[1], float(argv[2]), argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
