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
  fsize-limit                the job runs under a file-size limit (`ulimit -f`) below the
                             report's size, SIGXFSZ left as a shell leaves it
  launcher-killed            the launcher is killed (SIGKILL): its ranks and run directory
                             must go with it
  launcher-hup               the launcher is hung up (SIGHUP: its terminal or ssh session
                             went away): it ends the job as on SIGTERM
The TCP store's faults run the job as two nodes of one rank each (two launchers,
--nnodes=2, rank 0 hosting the TCP store at MASTER_ADDR:MASTER_PORT), as across machines:
  store-host-killed          rank 0, which hosts the store, is killed (SIGKILL)
  store-refused              node 1 starts with no store at MASTER_PORT (connection refused)
  store-wrong-token          node 1 says another DPB_STORE_TOKEN than node 0
  store-blackholed           node 1 starts against a store address that drops every
                             connection request (SYNs unanswered): bounded by --timeout
  stranger-hellos            70 connections from outside the job reach the store mid-run and
                             never say the token: half stream a hello claiming 16 MiB, half
                             trickle one byte at a time; the job must finish unharmed
  sigstop-two-nodes          one rank of a two-node job is stopped (SIGSTOP): both nodes end
  connection-dropped         every TCP connection of one rank is reset (RST) mid-run
  partition                  one rank's ports drop every packet mid-run (a NIC or link
                             gone): its peers hear nothing until their timeout
(the last two need iptables and root; without them they are skipped, and said so).
Network faults run the job on two nodes in one box (scripts/cluster.sh: network
namespaces joined by a bridge, one launcher and one rank each, rank 0 on node 0 hosting
the store at node 0's address, the links capped at 1 Gbit/s):
  link-down                  a node's link is cut mid-run, and restored after the timeout
  node1-killed, node0-killed every process of node 1 (node 0: the store's host) killed
  brown-out                  a node's link capped to 1 Mbit/s mid-run: the run finishes,
                             or ends with a timeout that names the slow peer; never hangs
(they need root and `ip netns`; without them they are skipped, and said so).

A run counts only where its fault landed, as seen from outside: the victim existed and
was signalled, the store's directory or the trace's was there and removed, the disk
filled, the packets were blocked; a hang landed when the hanging rank stopped using the
processor (from /proc, not from what it prints). Runs that ended before their fault are
listed apart and drawn again, so N faults means N that landed. A run that does not end
is found from outside too: the campaign kills it at timeout + 5 s after the fault and
counts it as hung.

Every run must end within --timeout + 5 s of its fault (or, for faults that only bite
when the run writes its outputs, of its natural end), with the culprit named in what it
printed, no process of the job left behind, no stray files, no shared-memory segment in
/dev/shm and no launcher's run directory in /tmp that was not there before it, and its
report, trace and checkpoint either the previous version or complete.

  python3 benchmarks/faults/fault_campaign.py --faults 200 --json out/faults.json

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
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_nodes import NodeFaults  # noqa: E402
from fault_tools import AT_WRITE, Firewall, HEARTBEAT_S, KINDS, Lines, NEED_IPTABLES, NET_NODES, TWO_NODES, cpu_ticks, file_state, fill, job_leftovers, processes_with, rank_pids, repo_root, stamp, try_mount_tmpfs  # noqa: E402


class Campaign(NodeFaults):
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
        self.firewall = Firewall()
        self.before = {}  # marker: the segments and run directories there before its run

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

    def start(self, cmd, marker, fsize_limit=None, env_extra=None, ignore_sigxfsz=True):
        env = dict(os.environ, DPB_FAULT_RUN=marker, **(env_extra or {}))
        self.before.setdefault(marker, job_leftovers())

        def pre():
            if fsize_limit is not None:
                import resource
                if ignore_sigxfsz:  # a write past the limit fails with EFBIG
                    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
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
        if (kind == "disk-full" and not self.tmpfs) or kind == "fsize-limit":
            fsize = len(self.previous["report"]) // 2
        marker = f"{uuid.uuid4().hex}-{i}"
        fault_in = rng.uniform(0.15, 0.85) * self.duration
        t0 = time.monotonic()
        # `ulimit -f` in a shell leaves SIGXFSZ at its default (the process is killed).
        p, out, err = self.start(self.command(kind, paths, extra), marker, fsize,
                                 ignore_sigxfsz=kind != "fsize-limit")
        fault_at = None
        written = {k: stamp(v) for k, v in paths.items()}  # the previous versions, as restored
        if kind in ("sigkill", "sigterm", "sigstop", "store", "disk-full", "trace-unwritable", "launcher-killed",
                    "launcher-hup"):
            while time.monotonic() - t0 < fault_in and p.poll() is None:
                time.sleep(0.005)
            # A fault at the write lands only before the run has written its outputs.
            already = kind in AT_WRITE and any(stamp(v) != written[k] for k, v in paths.items())
            if p.poll() is None and not already:
                fault_at = time.monotonic()
                if kind in ("sigkill", "sigterm", "sigstop"):
                    pids = rank_pids(p.pid)
                    if victim not in pids:
                        fault_at = None
                    else:
                        os.kill(pids[victim], {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM,
                                               "sigstop": signal.SIGSTOP}[kind])
                elif kind in ("launcher-killed", "launcher-hup"):
                    if rank_pids(p.pid):  # its ranks are running
                        os.kill(p.pid, signal.SIGKILL if kind == "launcher-killed" else signal.SIGHUP)
                    else:
                        fault_at = None
                elif kind == "store":
                    run_dir = f"/tmp/dpbench-run-{p.pid}"
                    if os.path.isdir(run_dir) and os.listdir(run_dir):
                        shutil.rmtree(run_dir, ignore_errors=True)
                    else:
                        fault_at = None  # no store in use yet (or gone): nothing to take away
                elif kind == "disk-full":
                    if self.tmpfs and not fill(self.disk):
                        fault_at = None
                elif kind == "trace-unwritable":
                    shutil.rmtree(os.path.dirname(paths["trace"]))
                    open(os.path.dirname(paths["trace"]), "w").close()
        elif kind in ("disk-full", "fsize-limit"):
            fault_at = t0  # the file-size limit holds from the start
        # A hang lands when the hanging rank stops using the processor (seen from /proc):
        # quiet for half a second while alive, from its last tick of work.
        victim_pid, ticks, last_work = None, None, None
        # Past its fault, a run is given timeout + 5 s, and a little more to see it end by
        # itself; one that is still there is killed and counted as hung.
        hard = t0 + self.duration * 3 + a.timeout + 30
        while p.poll() is None and time.monotonic() < hard:
            if kind == "hang" and fault_at is None:
                victim_pid = victim_pid or rank_pids(p.pid).get(victim)
                now_ticks = cpu_ticks(victim_pid) if victim_pid else None
                if now_ticks is not None and now_ticks != ticks:
                    ticks, last_work = now_ticks, time.monotonic()
                elif now_ticks is not None and last_work and time.monotonic() - last_work >= 0.5:
                    fault_at = last_work
            if fault_at is not None:
                hard = min(hard, fault_at + a.timeout + 8)
            time.sleep(0.01)
        if kind == "launcher-killed" and fault_at is not None:
            # The launcher is gone at once: the run ends when its ranks (and the process
            # that removes its run directory) have gone too.
            while processes_with(marker) and time.monotonic() < fault_at + a.timeout + 8:
                time.sleep(0.01)
        hung = p.poll() is None or (kind == "launcher-killed" and bool(processes_with(marker)))
        if hung:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            for pid in processes_with(marker):
                os.kill(pid, signal.SIGKILL)
            p.wait()
        end = time.monotonic()
        out.thread.join(5)
        err.thread.join(5)
        text = out.text() + err.text()
        result = {"fault": kind, "victim": victim, "exit": p.returncode, "seconds": end - t0}
        if kind == "hang":  # what the rank said, beside what was seen
            said = err.first(r"fault injection \(--hang-rank\)")
            result["hang_said_s"] = None if said is None else said - t0
            if fault_at is not None:
                result["hang_seen_s"] = fault_at - t0
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
            "launcher-killed": r"",  # nobody is left to say it: what counts is what remains
            "launcher-hup": r"stopped by signal 1\b",
            "fsize-limit": r"File too large",
            "sigkill": rf"rank {victim} \(pid \d+\) died: killed by signal 9",
            "sigterm": rf"rank {victim} \(pid \d+\) died: killed by signal 15",
            "sigstop": rf"rank {victim} \(pid \d+\) is stopped by signal 19",
            "hang": rf"rank\(s\) {victim} did not arrive",
            "store": r"store \(file store [^)]*\) (stopped answering|does not answer)|file store: cannot",
            "disk-full": r"(No space left on device|File too large).*|report\.json.*(No space|too large)",
            "trace-unwritable": r"tracedir",
        }[kind]
        survived = p.returncode == 0
        named = re.search(culprit, text)
        if kind == "store" and survived and not named and end - since < 2 * HEARTBEAT_S:
            # Gone at the very end: the run asked nothing more of its store (the ranks'
            # heartbeats would have found it missing within an interval).
            result["outcome"] = "ended before the fault bit"
            del result["after_fault_s"]
            return result, []
        if kind == "store" and survived:
            result["outcome"] = "completed, store loss reported" if named else "completed"
        elif kind == "launcher-killed":
            result["outcome"] = "launcher killed; its ranks and run directory gone with it"
        else:
            result["outcome"] = "failed, culprit named" if named else "failed"
        if not named:
            problems.append(f"culprit not named (looked for /{culprit}/)")
        if kind != "store" and survived:
            problems.append("exited 0 despite the fault")
        problems += self.leftovers(marker, paths)
        result["problems"] = problems
        return result, problems

    def leftovers(self, marker, paths):
        """What a run left that it should not have: processes of the job, outputs neither
        the previous version nor complete, stray files (removed, so the next run starts
        clean)."""
        problems = []
        time.sleep(0.2)
        new = job_leftovers() - self.before.pop(marker, set())
        if new:
            problems.append(f"left {sorted(new)}")
            for f in new:
                shutil.rmtree(f, ignore_errors=True) if os.path.isdir(f) else os.remove(f)
        left = processes_with(marker)
        if left:
            problems.append(f"left processes {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for k, path in paths.items():
            if k == "trace" and not os.path.isdir(os.path.dirname(path)):
                continue  # the fault took its directory away
            state = file_state(path, "json" if k != "checkpoint" else "safetensors")
            if state == "missing" or state.startswith("corrupt"):
                problems.append(f"{k} {state}")
        dirs = [d for d in (self.out, self.disk, os.path.dirname(paths["trace"])) if os.path.isdir(d)]
        strays = [os.path.join(d, f) for d in dirs for f in os.listdir(d)
                  if f not in ("report.json", "report.previous.json", "trace.json", "model.safetensors",
                               "tracedir", "disk", "out", "filler")]
        if strays:
            problems.append(f"stray files {[os.path.basename(f) for f in strays]}")
            for f in strays:
                if os.path.isfile(f):
                    os.remove(f)
        return problems

    def cleanup(self):
        if getattr(self, "net_why", "none") is None:
            self.cluster("down")
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
    results, failed, landed = [], 0, 0
    try:
        c.calibrate()
        if any(k in TWO_NODES for k in kinds):
            c.calibrate_two_nodes()
        c.net_why = "not drawn"
        if any(k in NET_NODES for k in kinds) and c.cluster_up():
            c.calibrate_net()
        if not c.tmpfs and "disk-full" in kinds:
            print("disk-full: cannot mount a tmpfs here; a file-size limit stands in (set at the start)")
        if not c.firewall.cmd and any(k in NEED_IPTABLES for k in kinds):
            print(f"connection-dropped, partition: skipped ({c.firewall.why})")
        # N faults that landed: a run that ended before its fault is listed and drawn again.
        i = 0
        while landed < a.faults and i < 3 * a.faults:
            kind = kinds[landed % len(kinds)]
            r, problems = (c.one_tcp if kind in TWO_NODES else c.one_net if kind in NET_NODES else c.one)(i, kind, rng)
            i += 1
            results.append(r)
            if r["outcome"].startswith("skipped"):
                kinds = [k for k in kinds if k != kind]
                print(f"{kind}: {r['outcome']}", flush=True)
                if not kinds:
                    break
                continue
            landed += "after_fault_s" in r
            failed += bool(problems)
            t = r.get("after_fault_s")
            print(f"{i:3d} {kind:18s} rank {r['victim']}  exit {str(r['exit']):>14}  "
                  f"{'%.2f s after the fault' % t if t is not None else '':24s} {r['outcome']}"
                  + ("  PROBLEMS: " + "; ".join(problems) if problems else ""), flush=True)
    finally:
        c.firewall.clear() if c.firewall.cmd else None
        c.cleanup()
    kinds = a.kinds.split(",")
    print(f"\n{'fault':18s} {'landed':>6} {'ok':>4} {'not landed':>10} {'worst s after fault':>20}  outcomes")
    for k in kinds:
        rs = [r for r in results if r["fault"] == k and "after_fault_s" in r]
        missed = sum(1 for r in results if r["fault"] == k and r["outcome"].startswith("ended before the fault"))
        times = [r["after_fault_s"] for r in rs]
        outcomes = {}
        for r in rs:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        ok = sum(1 for r in rs if not r.get("problems"))
        print(f"{k:18s} {len(rs):6d} {ok:4d} {missed:10d} {max(times) if times else float('nan'):20.2f}  "
              + ", ".join(f"{v} {o}" for o, v in sorted(outcomes.items())))
    worst = max((r["after_fault_s"] for r in results if "after_fault_s" in r), default=float("nan"))
    print(f"\n{landed} fault(s) landed ({len(results) - landed} run(s) ended before theirs or were skipped), "
          f"{failed} with problems; worst {worst:.2f} s after the fault (limit: --timeout {a.timeout:g} + 5 s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"timeout_s": a.timeout, "calibration_s": c.duration,
                       "calibration_two_nodes_s": getattr(c, "duration_two_nodes", None),
                       "calibration_namespace_nodes_s": getattr(c, "duration_net", None), "tmpfs": c.tmpfs,
                       "iptables": c.firewall.cmd, "seed": a.seed, "landed": landed, "runs": results}, f, indent=1)
    return 1 if failed or landed < a.faults else 0


if __name__ == "__main__":
    sys.exit(main())
