#!/usr/bin/env python3
"""Fault campaign: injects faults at random points of 2-rank DDP runs of dpbench and
checks how each run ends.

Faults (drawn in turn, each at a random moment of the run):
  sigkill, sigterm, sigstop  a signal to one rank (chosen at random)
  hang                       a rank that never reaches its next collective (--hang-rank)
  store                      the job's store disappears (the file store's directory removed)
  disk-full                  the report's file system fills up (a small tmpfs; without the
                             right to mount one, a file-size limit set at the start instead)
  trace-unwritable           the trace's directory is replaced by a file

Every run must end within --timeout + 5 s of its fault (or, for faults that only bite
when the run writes its outputs, of its natural end), with the culprit named in what it
printed, no process of the job left behind, no stray files, and its report, trace and
checkpoint either the previous version or complete.

  python3 benchmarks/faults/fault_campaign.py --faults 100 --json out/faults.json

Prints a table of counts per fault and the worst times; exits 1 when any run failed a
check.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

KINDS = ["sigkill", "sigterm", "sigstop", "hang", "store", "disk-full", "trace-unwritable"]
# Faults whose effect shows only when the run writes its outputs at the end.
AT_WRITE = {"disk-full", "trace-unwritable"}


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Lines:
    """Reads a pipe in a thread, timestamping each line."""

    def __init__(self, pipe):
        self.lines = []  # (monotonic time, text)
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe):
        for raw in iter(pipe.readline, b""):
            self.lines.append((time.monotonic(), raw.decode("utf-8", "replace")))
        pipe.close()

    def text(self):
        return "".join(t for _, t in self.lines)

    def first(self, pattern):
        rx = re.compile(pattern)
        for at, t in self.lines:
            if rx.search(t):
                return at
        return None


def processes_with(marker):
    """PIDs whose environment carries the campaign's marker for this run."""
    found = []
    needle = ("DPB_FAULT_RUN=" + marker).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(d))
        except OSError:
            pass
    return found


def rank_pids(launcher_pid):
    """{rank: pid} of the launcher's children."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(env[b"RANK"])] = int(d)
        except (OSError, ValueError, KeyError):
            pass
    return out


def file_state(path, kind):
    """'missing', 'complete' or 'corrupt: why' for a report, trace or checkpoint."""
    if not os.path.exists(path):
        return "missing"
    with open(path, "rb") as f:
        data = f.read()
    try:
        if kind == "json":
            doc = json.loads(data)
            return "complete" if isinstance(doc, dict) else "corrupt: not an object"
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        return "complete" if len(data) == 8 + n + end else f"corrupt: {len(data)} bytes, header says {8 + n + end}"
    except (ValueError, KeyError, TypeError, IndexError) as e:
        return f"corrupt: {e}"


def try_mount_tmpfs(path, size_kb):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", path],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def fill(path):
    """Fills the file system holding `path` until ENOSPC."""
    try:
        with open(os.path.join(path, "filler"), "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError:
        pass


class Campaign:
    def __init__(self, args):
        self.a = args
        self.work = tempfile.mkdtemp(prefix="dpb-faults-")
        self.disk = os.path.join(self.work, "disk")
        self.tmpfs = os.geteuid() == 0 and try_mount_tmpfs(self.disk, 1024)
        if not self.tmpfs:
            os.makedirs(self.disk, exist_ok=True)
        self.out = os.path.join(self.work, "out")
        os.makedirs(os.path.join(self.out, "tracedir"), exist_ok=True)
        self.previous = {}

    def paths(self, kind):
        report_dir = self.disk if kind == "disk-full" else self.out
        return {
            "report": os.path.join(report_dir, "report.json"),
            "trace": os.path.join(self.out, "tracedir", "trace.json"),
            "checkpoint": os.path.join(self.out, "model.safetensors"),
        }

    def command(self, kind, paths, extra=()):
        a = self.a
        return [a.dpbench, "--mode=ddp", "--gpus=2", "--model=mlp", "--batch=64", f"--steps={a.steps}",
                "--warmup=1", "--threads=1", "--workers=0", f"--timeout={a.timeout}", "--progress=none",
                "--json=" + paths["report"], "--trace=" + paths["trace"], "--save=" + paths["checkpoint"],
                *extra]

    def start(self, cmd, marker, fsize_limit=None):
        env = dict(os.environ, DPB_FAULT_RUN=marker)

        def pre():
            if fsize_limit is not None:
                import resource
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             start_new_session=True, preexec_fn=pre)
        return p, Lines(p.stdout), Lines(p.stderr)

    def calibrate(self):
        paths = self.paths("calibrate")
        t0 = time.monotonic()
        p, out, err = self.start(self.command("calibrate", paths), "calibrate")
        code = p.wait(timeout=600)
        self.duration = time.monotonic() - t0
        if code != 0:
            sys.exit("fault campaign: the run without a fault failed:\n" + err.text())
        for k, v in paths.items():
            with open(v, "rb") as f:
                self.previous[k] = f.read()
        # The disk-full run's report starts from the same previous version.
        with open(os.path.join(self.out, "report.previous.json"), "wb") as f:
            f.write(self.previous["report"])
        print(f"calibration: a run without a fault takes {self.duration:.2f} s "
              f"(report {len(self.previous['report'])} B, checkpoint {len(self.previous['checkpoint'])} B)",
              flush=True)

    def restore(self, paths):
        for k, v in paths.items():
            if k == "trace" and not os.path.isdir(os.path.dirname(v)):
                os.remove(os.path.dirname(v))
                os.makedirs(os.path.dirname(v))
            with open(v, "wb") as f:
                f.write(self.previous[k])

    def one(self, i, kind, rng):
        a = self.a
        paths = self.paths(kind)
        for f in os.listdir(self.disk):
            os.remove(os.path.join(self.disk, f))
        self.restore(paths)
        victim = rng.randrange(2)
        extra, fsize = [], None
        if kind == "hang":
            extra = [f"--hang-rank={victim}:{rng.randrange(2, a.steps)}"]
        if kind == "disk-full" and not self.tmpfs:
            fsize = len(self.previous["report"]) // 2
        marker = f"{uuid.uuid4().hex}-{i}"
        fault_in = rng.uniform(0.15, 0.85) * self.duration
        t0 = time.monotonic()
        p, out, err = self.start(self.command(kind, paths, extra), marker, fsize)
        fault_at = None
        if kind in ("sigkill", "sigterm", "sigstop", "store", "disk-full", "trace-unwritable"):
            while time.monotonic() - t0 < fault_in and p.poll() is None:
                time.sleep(0.005)
            if p.poll() is None:
                fault_at = time.monotonic()
                if kind in ("sigkill", "sigterm", "sigstop"):
                    pids = rank_pids(p.pid)
                    if victim not in pids:
                        fault_at = None
                    else:
                        os.kill(pids[victim], {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM,
                                               "sigstop": signal.SIGSTOP}[kind])
                elif kind == "store":
                    shutil.rmtree(f"/tmp/dpbench-run-{p.pid}", ignore_errors=True)
                elif kind == "disk-full":
                    if self.tmpfs:
                        fill(self.disk)
                elif kind == "trace-unwritable":
                    shutil.rmtree(os.path.dirname(paths["trace"]))
                    open(os.path.dirname(paths["trace"]), "w").close()
        hard = t0 + self.duration * 3 + a.timeout + 30
        while p.poll() is None and time.monotonic() < hard:
            time.sleep(0.01)
        hung = p.poll() is None
        if hung:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        end = time.monotonic()
        out.thread.join(5)
        err.thread.join(5)
        text = out.text() + err.text()
        if kind == "hang":
            fault_at = err.first(r"fault injection \(--hang-rank\)")
        result = {"fault": kind, "victim": victim, "exit": p.returncode, "seconds": end - t0}
        if fault_at is None:
            result["outcome"] = "ended before the fault"
            return result, []
        # The time that counts: from the fault, or for faults at the write, from when the
        # run would have ended.
        since = fault_at if kind not in AT_WRITE else max(fault_at, t0 + self.duration)
        result["after_fault_s"] = end - since
        problems = []
        if hung:
            problems.append("hung: killed by the campaign")
        if end - since > a.timeout + 5:
            problems.append(f"ended {end - since:.2f} s after the fault (limit {a.timeout + 5:.0f} s)")
        culprit = {
            "sigkill": rf"rank {victim} \(pid \d+\) died: killed by signal 9",
            "sigterm": rf"rank {victim} \(pid \d+\) died: killed by signal 15",
            "sigstop": rf"rank {victim} \(pid \d+\) is stopped by signal 19",
            "hang": rf"rank\(s\) {victim} did not arrive",
            "store": r"store \(file store [^)]*\) (stopped answering|does not answer)|file store: cannot",
            "disk-full": r"(No space left on device|File too large).*|report\.json.*(No space|too large)",
            "trace-unwritable": r"tracedir",
        }[kind]
        survived = p.returncode == 0
        if kind == "store" and survived:
            result["outcome"] = "completed, store loss reported" if re.search(culprit, text) else "completed"
        else:
            result["outcome"] = "failed, culprit named" if re.search(culprit, text) else "failed"
        if not re.search(culprit, text):
            problems.append(f"culprit not named (looked for /{culprit}/)")
        if kind != "store" and survived:
            problems.append("exited 0 despite the fault")
        time.sleep(0.2)
        left = processes_with(marker)
        if left:
            problems.append(f"left processes {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if os.path.exists(f"/tmp/dpbench-run-{p.pid}"):
            problems.append(f"left /tmp/dpbench-run-{p.pid}")
            shutil.rmtree(f"/tmp/dpbench-run-{p.pid}", ignore_errors=True)
        for k, path in paths.items():
            if k == "trace" and not os.path.isdir(os.path.dirname(path)):
                continue  # the fault took its directory away
            state = file_state(path, "json" if k != "checkpoint" else "safetensors")
            if state == "missing" or state.startswith("corrupt"):
                problems.append(f"{k} {state}")
        strays = [f for d in (self.out, self.disk, os.path.dirname(paths["trace"]))
                  if os.path.isdir(d) for f in os.listdir(d)
                  if f not in ("report.json", "report.previous.json", "trace.json", "model.safetensors",
                               "tracedir", "filler")]
        if strays:
            problems.append(f"stray files {strays}")
        result["problems"] = problems
        return result, problems

    def cleanup(self):
        if self.tmpfs:
            subprocess.run(["umount", self.disk])
        shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpbench", default=os.path.join(repo_root(), "build/benchmarks/dpbench/dpbench"))
    ap.add_argument("--faults", type=int, default=100)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS))
    ap.add_argument("--timeout", type=float, default=3.0, help="dpbench --timeout (seconds)")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write every run's result here")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            ap.error(f"unknown fault '{k}' (valid: {', '.join(KINDS)})")
    rng = random.Random(a.seed)
    c = Campaign(a)
    results, failed = [], 0
    try:
        c.calibrate()
        if not c.tmpfs and "disk-full" in kinds:
            print("disk-full: cannot mount a tmpfs here; a file-size limit stands in (set at the start)")
        for i in range(a.faults):
            kind = kinds[i % len(kinds)]
            r, problems = c.one(i, kind, rng)
            results.append(r)
            failed += bool(problems)
            t = r.get("after_fault_s")
            print(f"{i + 1:3d} {kind:17s} rank {r['victim']}  exit {r['exit']:>4}  "
                  f"{'%.2f s after the fault' % t if t is not None else '':24s} {r['outcome']}"
                  + ("  PROBLEMS: " + "; ".join(problems) if problems else ""), flush=True)
    finally:
        c.cleanup()
    print(f"\n{'fault':17s} {'runs':>4} {'ok':>4} {'worst s after fault':>20}  outcomes")
    for k in kinds:
        rs = [r for r in results if r["fault"] == k]
        times = [r["after_fault_s"] for r in rs if "after_fault_s" in r]
        outcomes = {}
        for r in rs:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        ok = sum(1 for r in rs if not r.get("problems"))
        print(f"{k:17s} {len(rs):4d} {ok:4d} {max(times) if times else float('nan'):20.2f}  "
              + ", ".join(f"{v} {o}" for o, v in sorted(outcomes.items())))
    worst = max((r["after_fault_s"] for r in results if "after_fault_s" in r), default=float("nan"))
    print(f"\n{len(results)} fault(s), {failed} with problems; worst {worst:.2f} s after the fault "
          f"(limit: --timeout {a.timeout:g} + 5 s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"timeout_s": a.timeout, "calibration_s": c.duration, "tmpfs": c.tmpfs,
                       "runs": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
