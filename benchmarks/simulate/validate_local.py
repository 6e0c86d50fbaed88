#!/usr/bin/env python3
"""Checks `dpbench --simulate` against this machine: for each model, a single-device
--layer-profile run (alone, and again with a second rank training beside it) and two
Gloo --bench=collectives runs (idle, and --load: beside compute) give the prediction of
E(2) for --mode=ddp (or --mode=fsdp, --mode=tp) --threads=1; a measured --gpus=1,2 sweep gives
E(2) itself. Prints both, side by side, and exits 1 when any prediction is more than
--tolerance away.

  python3 benchmarks/simulate/validate_local.py [--dpbench build/benchmarks/dpbench/dpbench] [--mode fsdp]

Every run leaves its files (profiles, links, measured sweeps) in a work directory it
names. --replay DIR [DIR ...] measures nothing: it predicts again from those files with
this tree's simulator and compares with what was measured then, so a change to the
simulator is checked against every earlier measurement at once.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

# (model, batch, steps, extra flags): LeNet's and the MLP's steps take a few ms, so they
# need many steps for a median that is stable to a percent; the measured sweep takes the
# median of --repeat runs. ResNet-18 with 1 MiB buckets has many all-reduces in flight
# during the backward (11 MiB of gradients in ~12 buckets), the default 25 MiB one.
MODELS = {
    "ddp": [("lenet", 64, 200, [], []), ("mlp", 64, 200, [], []), ("resnet18", 16, 30, [], []),
            ("resnet18", 16, 30, ["--bucket-mb=1"], [])],
    # (model, batch, steps, flags of the sweep and the prediction, flags of every run)
    "fsdp": [("mlp", 64, 200, [], []), ("mlp", 64, 200, ["--fsdp-prefetch=0"], []),
             ("gpt2-tiny", 4, 40, [], ["--data=synthetic"])],
    # Tensor parallelism: every rank on the whole batch (strong scaling).
    "tp": [("mlp", 64, 200, [], []), ("gpt2-tiny", 8, 40, [], ["--data=synthetic"])],
}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("validate_local: failed: " + " ".join(cmd) + "\n" + r.stdout)
    return r.stdout


def simulate_argv(d, work, mode, model, extra, tag=None):
    """The prediction's command line for one case of a work directory: its profiles
    (profile_TAG.json, crowded_TAG.json, where a case has its own) or the model's."""
    own = tag and os.path.exists(os.path.join(work, f"profile_{tag}.json"))
    profile = os.path.join(work, f"profile_{tag if own else model}.json")
    crowded = os.path.join(work, f"crowded_{tag if own else model}.json")
    # The idle link's repeats (gloo2.json, gloo2-2.json, ...) and the loaded one's
    # (gloo2-load.json, gloo2-load-2.json, ...): each size's median is fitted.
    def repeats(stem):
        return [os.path.join(work, f"{stem}.json")] + sorted(
            os.path.join(work, f) for f in os.listdir(work) if re.fullmatch(stem + r"-[0-9]+\.json", f))
    link = ",".join(repeats("gloo2") + repeats("gloo2-load"))
    argv = [d, "--simulate", f"--mode={mode}", "--gpus=2", "--profile=" + profile, "--link=" + link,
            "--hardware=cpu-gloo-local", *extra]
    if os.path.exists(crowded):
        argv.append("--crowded-profile=" + crowded)
    return argv


def efficiency(path, world=2):
    return next(p["scaling_efficiency"] for p in json.load(open(path))["sweep"] if p["world_size"] == world)


def replay(d, dirs, tolerance):
    """Predicts again from earlier runs' files; prints each case and the summary per mode."""
    rows = []
    for work in dirs:
        if not os.path.isdir(work):
            sys.exit(f"validate_local: --replay {work}: not a directory (give the work directories earlier runs named)")
        cases = os.path.join(work, "cases.json")
        if os.path.exists(cases):
            listed = json.load(open(cases))
        else:  # runs from before the manifest: the case is in the file name (model_flagvalue...)
            listed = []
            for name in sorted(os.listdir(work)):
                m = re.fullmatch(r"measured_(.+)\.json", name)
                if not m:
                    continue
                model, *flags = m.group(1).split("_")
                extra = []
                for f in flags:
                    fv = re.fullmatch(r"([a-z-]+?)([0-9.]+)", f)
                    if not fv:
                        sys.exit(f"validate_local: cannot read the flags of {os.path.join(work, name)}")
                    extra.append(f"--{fv.group(1)}={fv.group(2)}")
                mode = json.load(open(os.path.join(work, name)))["config"]["mode"]
                listed.append({"mode": mode, "model": model, "extra": extra, "measured": name})
        for c in listed:
            out = os.path.join(work, "replayed.json")
            run([*simulate_argv(d, work, c["mode"], c["model"], c["extra"], c.get("tag")), "--json=" + out])
            e_meas, e_pred = efficiency(os.path.join(work, c["measured"])), efficiency(out)
            os.remove(out)
            rows.append((c["mode"], c["model"] + "".join(" " + e for e in c["extra"]), os.path.basename(work), e_meas,
                         e_pred))
    print(f"{'mode':5s} {'case':28s} {'run':24s} {'measured':>9s} {'predicted':>10s} {'difference':>11s}")
    for mode, case, work, e_meas, e_pred in sorted(rows):
        print(f"{mode:5s} {case:28s} {work:24s} {e_meas:9.3f} {e_pred:10.3f} {e_pred - e_meas:+11.3f}")
    print()
    for mode in sorted({r[0] for r in rows}):
        diffs = [abs(r[4] - r[3]) for r in rows if r[0] == mode]
        print(f"{mode}: {len(diffs)} cases, mean |difference| {statistics.mean(diffs):.3f}, worst {max(diffs):.3f}, "
              f"{sum(x <= tolerance for x in diffs)} within {tolerance}")
    return 0


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpbench", default=os.path.join(root, "build/benchmarks/dpbench/dpbench"))
    ap.add_argument("--repeat", type=int, default=3, help="measured sweeps per model (median)")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--link-repeats", type=int, default=3, help="idle collectives runs (each size's median is fitted)")
    ap.add_argument("--mode", choices=sorted(MODELS), default="ddp")
    ap.add_argument("--replay", nargs="+", metavar="DIR", help="predict again from earlier runs' work directories")
    a = ap.parse_args()
    d = a.dpbench
    if a.link_repeats < 1:
        sys.exit(f"validate_local: --link-repeats {a.link_repeats}: the link is measured at least once")
    if a.replay:
        return replay(d, a.replay, a.tolerance)
    work = tempfile.mkdtemp(prefix="dpb-validate-")
    cases = []
    common = ["--threads=1", "--warmup=5", "--progress=none"]
    # The link twice: idle, and with every rank's core also computing (--load), as during
    # DDP's backward; the second gives the all-reduce's time beside compute and the
    # contention, both measured.
    link = os.path.join(work, "gloo2.json")
    loaded = os.path.join(work, "gloo2-load.json")
    sizes = ["--bench=collectives", "--gpus=2", "-b", "1K", "-e", "64M", "-f", "4", "-n", "20"]
    # FSDP's all-gathers and reduce-scatters (tensor parallelism's loss all-gather) are
    # measured too (the link fits each).
    ops = {"fsdp": ["--ops=allreduce,allgather,reduce_scatter"], "tp": ["--ops=allreduce,allgather"]}.get(
        a.mode, ["--ops=allreduce"])
    # An idle all-reduce of 1 MiB took 29 to 83 us in five runs a minute apart on a 2-vCPU
    # VM: the link is measured --link-repeats times and each size's median fitted.
    for i in range(a.link_repeats):
        run([d, *sizes, *ops, "--json=" + (link if i == 0 else os.path.join(work, f"gloo2-{i + 1}.json"))])
    run([d, *sizes, "--ops=allreduce", "--load", "--json=" + loaded])
    print(f"{'model':24s} {'batch':>5s} {'E(2) measured':>14s} {'E(2) predicted':>15s} {'difference':>11s}")
    worst = 0.0
    for model, batch, steps, extra, data in MODELS[a.mode]:
        tag = model + "".join(f.replace("--", "_").replace("=", "") for f in extra)
        profile = os.path.join(work, f"profile_{model}.json")
        measured = os.path.join(work, f"measured_{tag}.json")
        predicted = os.path.join(work, f"predicted_{tag}.json")
        crowded = os.path.join(work, f"crowded_{model}.json")
        if not os.path.exists(profile):
            single = [d, "--mode=single", f"--model={model}", f"--batch={batch}", *data, *common]
            run([*single, "--layer-profile", "--json=" + profile, f"--steps={steps}"])
            # The same profile with a second rank training beside it the whole time (it
            # runs four times the steps): how much the ranks slow each other's compute.
            companion = subprocess.Popen([*single, f"--steps={4 * steps}"], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            run([*single, "--layer-profile", "--json=" + crowded, f"--steps={steps}"])
            companion.kill()
            companion.wait()
        run([d, f"--mode={a.mode}", "--gpus=1,2", f"--model={model}", f"--batch={batch}", "--json=" + measured,
             f"--steps={steps}", f"--repeat={a.repeat}", *extra, *data, *common])
        run([*simulate_argv(d, work, a.mode, model, extra), "--json=" + predicted])
        cases.append({"mode": a.mode, "model": model, "extra": extra, "measured": os.path.basename(measured)})
        with open(os.path.join(work, "cases.json"), "w") as f:
            json.dump(cases, f, indent=1)
        e_meas, e_pred = efficiency(measured), efficiency(predicted)
        diff = e_pred - e_meas
        worst = max(worst, abs(diff))
        print(f"{model + ' ' + ' '.join(extra):24s} {batch:5d} {e_meas:14.3f} {e_pred:15.3f} {diff:+11.3f}", flush=True)
    print(f"\nworst difference {worst:.3f} (tolerance {a.tolerance}); files in {work}")
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
