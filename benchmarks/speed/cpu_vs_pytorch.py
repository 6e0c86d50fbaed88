#!/usr/bin/env python3
"""dpbench's CPU training step against PyTorch's, on the three workloads the project
tracks (mlp b64, lenet b64, resnet18 b16), one thread each, alternated in one run on one
machine; records the processor (model, ISA flags, the ISA oneDNN dispatches to) beside the
figures, appends them to a history, and flags a drop of more than --tolerance (10%)
against the last recorded figure on the same processor.

    PY="$(benchmarks/pytorch_reference/venv.sh)"      # PyTorch 2.15 from PyPI
    "$PY" benchmarks/speed/cpu_vs_pytorch.py [--repeat 5] [--steps 30] \\
        [--history reports/results/cpu-speed-history.json] [--record]

Each figure is the median over --repeat runs of each side's median step (warm-up
excluded): samples/s = batch / step. dpbench runs `--mode=single --threads=1`; PyTorch runs
benchmarks/pytorch_reference/train_step.py (same models, SGD with momentum, the loss read
every step) under this interpreter. Exit status: 0, or 3 when a figure dropped by more than
the tolerance against the last record for this processor (--record appends this run to
the history either way).
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = [("mlp", 64), ("lenet", 64), ("resnet18", 16)]


# --max-isa avx2: the vector ISA both sides' libraries may use, held below what the
# processor has. oneDNN (dpbench's primitives and GEMM, PyTorch's convolutions), MKL
# (PyTorch's GEMM) and PyTorch's own kernels (ATEN_CPU_CAPABILITY) obey it; dpbench's own
# loops (pooling, softmax, GELU, the optimizers) pick their ISA when the program loads
# and still run AVX-512 code where the processor has it.
HELD = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                 "ATEN_CPU_CAPABILITY": "avx2"}}
ENV = dict(os.environ)


def processor(dpbench):
    """{model, flags (the vector ISA extensions the CPU reports), onednn_isa}."""
    model, flags = platform.processor() or platform.machine(), set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile"]
    # The ISA oneDNN dispatches to, from its verbose header.
    env = dict(ENV, DNNL_VERBOSE="1", ONEDNN_VERBOSE="1")
    p = subprocess.run([dpbench, "--mode=single", "--model=mlp", "--batch=8", "--steps=1", "--warmup=0", "--threads=1",
                        "--progress=none"], capture_output=True, text=True, env=env)
    isa = next((m.group(1).strip() for m in re.finditer(r"isa:([^\n]*)", p.stdout + p.stderr)), None)
    return {"model": model, "flags": [f for f in wanted if f in flags], "onednn_isa": isa}


def run_dpbench(dpbench, model, batch, steps, warmup):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([dpbench, "--mode=single", f"--model={model}", f"--batch={batch}", "--threads=1",
                        f"--steps={steps}", f"--warmup={warmup}", "--progress=none", f"--json={out.name}"],
                       check=True, capture_output=True, env=ENV)
        run = json.load(open(out.name))["runs"][0]
        return run["throughput_samples_per_s"]


def run_pytorch(model, batch, steps, warmup):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks/pytorch_reference/train_step.py"), "--model",
                        model, "--batch", str(batch), "--threads", "1", "--steps", str(steps), "--warmup", str(warmup)],
                       check=True, capture_output=True, text=True, env=ENV)
    return json.loads(p.stdout)["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpbench", default=os.path.join(ROOT, "build/benchmarks/dpbench/dpbench"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cases", default=",".join(f"{m}:{b}" for m, b in CASES), help="model:batch,...")
    ap.add_argument("--history", default=os.path.join(ROOT, "reports/results/cpu-speed-history.json"))
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--record", action="store_true", help="append this run to the history")
    ap.add_argument("--max-isa", choices=sorted(HELD), help="hold both sides' libraries to this ISA (a stand-in for "
                    "a processor without AVX-512; dpbench's own loops are not held)")
    a = ap.parse_args()
    if a.max_isa:
        ENV.update(HELD[a.max_isa])
    import torch  # the reference; in the venv that benchmarks/pytorch_reference/venv.sh makes

    cpu = processor(a.dpbench)
    # The commit measured; "-dirty" when the tracked sources differed from it.
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True,
                         text=True).stdout.strip()
    results = []
    for case in a.cases.split(","):
        model, batch = case.split(":")
        ours, ref = [], []
        for _ in range(a.repeat):  # alternated, so that the machine's drift hits both alike
            ours.append(run_dpbench(a.dpbench, model, int(batch), a.steps, a.warmup))
            ref.append(run_pytorch(model, int(batch), a.steps, a.warmup))
        results.append({"model": model, "batch": int(batch), "threads": 1,
                        "dpbench_samples_per_s": statistics.median(ours), "pytorch_samples_per_s": statistics.median(ref),
                        "ratio": statistics.median(ours) / statistics.median(ref), "dpbench_runs": ours,
                        "pytorch_runs": ref})
    entry = {"date": datetime.date.today().isoformat(), "git": git, "cpu": cpu, "cores": os.cpu_count(),
             "torch": torch.__version__, "repeat": a.repeat, "steps": a.steps, "results": results}
    if a.max_isa:
        entry["held_isa"] = {"isa": a.max_isa, "environment": HELD[a.max_isa],
                             "not_held": "dpbench's own loops (pooling, softmax, GELU, optimizers)"}

    history = json.load(open(a.history)) if os.path.exists(a.history) else []
    same = [h for h in history if h["cpu"]["model"] == cpu["model"] and h["cpu"]["flags"] == cpu["flags"] and
            h.get("held_isa", {}).get("isa") == a.max_isa]
    last = same[-1] if same else None
    print(f"CPU: {cpu['model']} ({', '.join(cpu['flags'])}; oneDNN: {cpu['onednn_isa']}), {os.cpu_count()} cores; "
          f"PyTorch {torch.__version__}; medians of {a.repeat} alternated runs, 1 thread"
          + (f"; libraries held to {a.max_isa} on both sides (dpbench's own loops not)" if a.max_isa else ""))
    print(f"{'model':>9} {'batch':>5} {'dpbench/s':>11} {'pytorch/s':>11} {'ratio':>7}   against the last record here")
    dropped = []
    for r in results:
        before = None
        if last:
            before = next((x for x in last["results"] if x["model"] == r["model"] and x["batch"] == r["batch"]), None)
        change = ""
        if before:
            d = r["dpbench_samples_per_s"] / before["dpbench_samples_per_s"] - 1
            ref = r["pytorch_samples_per_s"] / before["pytorch_samples_per_s"] - 1
            change = f"{100 * d:+.1f}% ({last['date']}, {last['git']}; PyTorch {100 * ref:+.1f}%)"
            if d < -a.tolerance:
                # Flagged either way; where the reference fell as far in the same run, the
                # machine ran slower (a shared VM's speed drifts), which the line says.
                change += "  <- DROP" + (" (PyTorch fell as far: the machine)" if ref <= d else "")
                dropped.append(r["model"])
        print(f"{r['model']:>9} {r['batch']:>5} {r['dpbench_samples_per_s']:>11.1f} {r['pytorch_samples_per_s']:>11.1f} "
              f"{r['ratio']:>6.2f}x   {change or 'no earlier record on this processor'}")
    if a.record:
        history.append(entry)
        with open(a.history, "w") as f:
            json.dump(history, f, indent=1)
            f.write("\n")
    if dropped:
        print(f"cpu_vs_pytorch: dpbench is more than {100 * a.tolerance:.0f}% slower than its last record on this "
              f"processor for: {', '.join(dropped)}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
