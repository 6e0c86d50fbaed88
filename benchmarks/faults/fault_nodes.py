"""The fault campaign's jobs of two nodes: two launchers around the TCP store (one
rank each, as across machines), and two network-namespace nodes of scripts/cluster.sh.
A mixin of fault_campaign.Campaign: it uses the campaign's own start, restore and
leftovers checks."""
import os
import re
import signal
import subprocess
import sys
import time
import uuid

from fault_tools import NEED_IPTABLES, Blackhole, Strangers, end_nodes, file_state, free_port, rank_pids, repo_root, \
    tcp_ports


class NodeFaults:
    def node_command(self, node, port, paths):
        a = self.a
        return [a.dpbench, "--mode=ddp", "--gpus=1", "--nnodes=2", f"--node-rank={node}", "--master-addr=127.0.0.1",
                f"--master-port={port}", "--model=mlp", "--batch=64", f"--steps={a.steps}", "--warmup=1",
                "--threads=1", "--workers=0", f"--timeout={a.timeout}", "--progress=none",
                "--json=" + paths["report"], "--trace=" + paths["trace"], "--save=" + paths["checkpoint"]]

    def one_tcp(self, i, kind, rng):
        """A fault of a job of two nodes around the TCP store (TWO_NODES)."""
        a = self.a
        paths = self.paths(kind)
        self.restore(paths)
        if kind in NEED_IPTABLES and not self.firewall.cmd:
            return {"fault": kind, "victim": None, "exit": None, "outcome": "skipped: " + self.firewall.why}, []
        victim = 0 if kind in ("store-host-killed", "stranger-hellos") else 1 if kind in (
            "store-refused", "store-wrong-token", "store-blackholed") else rng.randrange(2)
        blackhole = Blackhole() if kind == "store-blackholed" else None
        port = blackhole.port if blackhole else free_port()
        marker = f"{uuid.uuid4().hex}-{i}"
        tokens = {0: "job-token", 1: "another-token" if kind == "store-wrong-token" else "job-token"}
        t0 = time.monotonic()
        nodes = {}
        for node in (0, 1):
            if kind in ("store-refused", "store-blackholed") and node == 0:
                continue  # nobody hosts the store at that port (or nobody answers there)
            nodes[node] = self.start(self.node_command(node, port, paths), marker,
                                     env_extra={"DPB_STORE_TOKEN": tokens[node]})
        fault_at, strangers = None, None
        if kind in ("store-refused", "store-wrong-token", "store-blackholed"):
            fault_at = t0  # wrong from the start
        else:
            fault_in = rng.uniform(0.25, 0.85) * self.duration_two_nodes
            while time.monotonic() - t0 < fault_in and all(p.poll() is None for p, _, _ in nodes.values()):
                time.sleep(0.005)
            launcher = nodes[victim][0]
            pid = rank_pids(launcher.pid).get(victim) if launcher.poll() is None else None
            if pid is not None:
                if kind in ("store-host-killed", "sigstop-two-nodes"):
                    os.kill(pid, signal.SIGKILL if kind == "store-host-killed" else signal.SIGSTOP)
                    fault_at = time.monotonic()
                elif kind == "stranger-hellos":
                    strangers = Strangers("127.0.0.1", port)
                    fault_at = time.monotonic()
                else:
                    ports = tcp_ports(pid)
                    if ports and self.firewall.block(ports, "drop" if kind == "partition" else "reset"):
                        fault_at = time.monotonic()
        hard = t0 + self.duration_two_nodes * 3 + a.timeout + 30
        while any(p.poll() is None for p, _, _ in nodes.values()) and time.monotonic() < hard:
            if fault_at is not None:
                hard = min(hard, fault_at + a.timeout + 8)
            time.sleep(0.01)
        hung, end, texts = end_nodes(nodes)
        self.firewall.clear()
        if strangers:
            strangers.stop()
        if blackhole:
            blackhole.close()
        result = {"fault": kind, "victim": victim, "exit": {n: p.returncode for n, (p, _, _) in nodes.items()},
                  "seconds": end - t0}
        if fault_at is None:
            result["outcome"] = "ended before the fault"
            return result, []
        result["after_fault_s"] = end - fault_at
        if kind == "stranger-hellos":
            return self.judge_strangers(result, strangers, nodes, hung, end - fault_at, marker, paths)
        survivors = [n for n in nodes if not (kind in ("store-host-killed", "sigstop-two-nodes") and n == victim)]
        if kind in NEED_IPTABLES | {"store-host-killed", "sigstop-two-nodes"} and all(nodes[n][0].returncode == 0 for n in survivors) and all(
                file_state(v, "json" if k != "checkpoint" else "safetensors") == "complete" for k, v in paths.items()):
            # After the job's last message (every collective had completed): nothing to bite.
            result["outcome"] = "ended before the fault bit"
            del result["after_fault_s"]
            return result, []
        problems = []
        if hung:
            problems.append(f"hung: node(s) {hung} killed by the campaign")
        if end - fault_at > a.timeout + 5:
            problems.append(f"ended {end - fault_at:.2f} s after the fault (limit {a.timeout + 5:.0f} s)")
        # What each node must name: the culprit, from where it stands.
        peer = 1 - victim
        lost_peer = r"rank {r}|peer {r}|rank\(s\) {r} did not arrive"
        culprits = {
            "store-host-killed": {0: r"rank 0 \(pid \d+\) died: killed by signal 9",
                                  1: r"store's host \(rank 0\) is gone|" + lost_peer.format(r=0)},
            "store-refused": {1: r"could not connect to 127\.0\.0\.1:%d .*Connection refused" % port},
            "store-blackholed": {1: r"could not connect to 127\.0\.0\.1:%d within" % port},
            "sigstop-two-nodes": {victim: rf"rank {victim} \(pid \d+\) (is stopped by signal 19|stayed stopped)",
                                  peer: lost_peer.format(r=victim)},
            "store-wrong-token": {1: r"job token differs from rank 0's",
                                  0: r"rank\(s\) 1 (did not arrive|never joined)"},
            "connection-dropped": {victim: lost_peer.format(r=peer) + "|" + lost_peer.format(r=victim),
                                   peer: lost_peer.format(r=victim)},
            # Cut off, the victim cannot tell its link from its peer's: it names the peer,
            # or the store it can no longer reach.
            "partition": {victim: lost_peer.format(r=peer) + r"|store \(tcp store [^)]*\) does not answer",
                          peer: lost_peer.format(r=victim)},
        }[kind]
        named = all(re.search(rx, texts.get(n, "")) for n, rx in culprits.items())
        survived = [n for n, (p, _, _) in nodes.items() if p.returncode == 0]
        result["outcome"] = "failed, culprit named" if named else "failed"
        for n, rx in culprits.items():
            if not re.search(rx, texts.get(n, "")):
                problems.append(f"node {n}: culprit not named (looked for /{rx}/)")
        if survived:
            problems.append(f"node(s) {survived} exited 0 despite the fault")
        problems += self.leftovers(marker, paths)
        result["problems"] = problems
        result["said"] = {n: t[-600:] for n, t in texts.items()} if problems else None
        return result, problems

    def judge_strangers(self, result, strangers, nodes, hung, after, marker, paths):
        """The job must not notice strangers at its store: both nodes finish (exit 0), in
        about the time they take without them."""
        a = self.a
        problems = []
        result["strangers"] = {"opened": strangers.opened, "cut_off": strangers.cut}
        if strangers.opened == 0:  # the store had gone with the job's end: nobody reached it
            result["outcome"] = "ended before the fault"
            del result["after_fault_s"]
            return result, []
        failed = [n for n, (p, _, _) in nodes.items() if p.returncode != 0]
        if hung:
            problems.append(f"hung: node(s) {hung} killed by the campaign")
        if failed:
            problems.append(f"node(s) {failed} failed while strangers held connections to the store")
        if after > a.timeout + 5:
            problems.append(f"ended {after:.2f} s after the strangers came (limit {a.timeout + 5:.0f} s)")
        result["outcome"] = (f"completed; {strangers.cut} of {strangers.opened} strangers cut off"
                             if not failed else "failed")
        problems += self.leftovers(marker, paths)
        result["problems"] = problems
        return result, problems

    def cluster(self, *args):
        """scripts/cluster.sh, for the network faults' nodes; its exit code and output."""
        r = subprocess.run([os.path.join(repo_root(), "scripts/cluster.sh"), *args], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, DPB_CLUSTER="faults", DPB_CLUSTER_OWNER=str(os.getpid())))
        return r.returncode, r.stdout

    def cluster_up(self):
        if os.geteuid() != 0:
            self.net_why = "nodes in one box need root"
            return False
        code, out = self.cluster("up", "2", "--rate=1gbit")
        self.net_why = None if code == 0 else "scripts/cluster.sh up failed: " + out.strip()
        return code == 0

    def net_command(self, node, port, paths):
        a = self.a
        return [os.path.join(repo_root(), "scripts/cluster.sh"), "run", str(node), "--", a.dpbench, "--mode=ddp",
                "--gpus=1", "--nnodes=2", f"--node-rank={node}", "--master-addr=10.99.0.1", f"--master-port={port}",
                "--model=mlp", "--batch=64", f"--steps={a.steps}", "--warmup=1", "--threads=1", "--workers=0",
                f"--timeout={a.timeout}", "--progress=none", "--json=" + paths["report"], "--trace=" + paths["trace"],
                "--save=" + paths["checkpoint"]]

    def start_net(self, node, port, paths, marker):
        return self.start(self.net_command(node, port, paths), marker,
                          env_extra={"DPB_STORE_TOKEN": "job-token", "DPB_CLUSTER": "faults"})

    def calibrate_net(self):
        paths = self.paths("calibrate")
        port = free_port()
        t0 = time.monotonic()
        nodes = [self.start_net(n, port, paths, "calibrate-net") for n in (0, 1)]
        codes = [p.wait(timeout=600) for p, _, _ in nodes]
        self.duration_net = time.monotonic() - t0
        if any(codes):
            sys.exit("fault campaign: the run on two namespace nodes without a fault failed:\n" +
                     "".join(e.text() for _, _, e in nodes))
        self.restore(paths)
        print(f"calibration: two namespace nodes without a fault take {self.duration_net:.2f} s", flush=True)

    def node_pids(self, node):
        r = subprocess.run(["ip", "netns", "pids", f"faults-n{node}"], stdout=subprocess.PIPE, text=True)
        return [int(x) for x in r.stdout.split()]

    def one_net(self, i, kind, rng):
        """A network fault of a job on two namespace nodes (NET_NODES)."""
        a = self.a
        paths = self.paths(kind)
        self.restore(paths)
        if self.net_why:
            return {"fault": kind, "victim": None, "exit": None, "outcome": "skipped: " + self.net_why}, []
        victim = {"node1-killed": 1, "node0-killed": 0}.get(kind, rng.randrange(2))
        port = free_port()
        marker = f"{uuid.uuid4().hex}-{i}"
        t0 = time.monotonic()
        nodes = {n: self.start_net(n, port, paths, marker) for n in (0, 1)}
        fault_in = rng.uniform(0.25, 0.85) * self.duration_net
        while time.monotonic() - t0 < fault_in and all(p.poll() is None for p, _, _ in nodes.values()):
            time.sleep(0.005)
        fault_at, restored = None, False
        if all(p.poll() is None for p, _, _ in nodes.values()):
            if kind in ("node1-killed", "node0-killed"):
                pids = self.node_pids(victim)
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                fault_at = time.monotonic() if pids else None
            elif kind == "link-down":
                fault_at = time.monotonic() if self.cluster("link", str(victim), "down")[0] == 0 else None
            elif kind == "brown-out":
                fault_at = time.monotonic() if self.cluster("rate", str(victim), "1mbit")[0] == 0 else None
        hard = t0 + self.duration_net * 3 + a.timeout + 30
        while any(p.poll() is None for p, _, _ in nodes.values()) and time.monotonic() < hard:
            if fault_at is not None:
                hard = min(hard, fault_at + a.timeout + 8)
                if kind == "link-down" and not restored and time.monotonic() > fault_at + a.timeout + 1:
                    restored = self.cluster("link", str(victim), "up")[0] == 0
            time.sleep(0.01)
        hung, end, texts = end_nodes(nodes)
        self.cluster("link", str(victim), "up")
        self.cluster("rate", str(victim), "1gbit")
        result = {"fault": kind, "victim": victim, "exit": {n: p.returncode for n, (p, _, _) in nodes.items()},
                  "seconds": end - t0}
        if fault_at is None:
            result["outcome"] = "ended before the fault"
            return result, []
        result["after_fault_s"] = end - fault_at
        survivors = [n for n in nodes if not (kind.endswith("-killed") and n == victim)]
        completed = all(nodes[n][0].returncode == 0 for n in survivors)
        complete_files = all(file_state(v, "json" if k != "checkpoint" else "safetensors") == "complete"
                             for k, v in paths.items())
        if kind != "brown-out" and completed and complete_files:
            # After the job's last message (every collective had completed): nothing to bite.
            result["outcome"] = "ended before the fault bit"
            del result["after_fault_s"]
            return result, []
        problems = []
        if hung:
            problems.append(f"hung: node(s) {hung} killed by the campaign")
        if end - fault_at > a.timeout + 5 and not (kind == "brown-out" and completed):
            problems.append(f"ended {end - fault_at:.2f} s after the fault (limit {a.timeout + 5:.0f} s)")
        lost = r"rank {r}\b|peer {r}|rank\(s\) {r} (did not arrive|never joined)|the link to rank\(s\) ([0-9]+, )*{r}\b"
        store = r"tcp store 10\.99\.0\.1:%d" % port
        if kind == "brown-out" and completed:
            result["outcome"] = "completed at the slower rate"
        else:
            # Each survivor names what went away: the other node's rank, or the store.
            rx = {n: lost.format(r=1 - n) + "|" + store for n in survivors}
            named = all(re.search(x, texts.get(n, "")) for n, x in rx.items())
            result["outcome"] = "failed, culprit named" if named else "failed"
            for n, x in rx.items():
                if not re.search(x, texts.get(n, "")):
                    problems.append(f"node {n}: culprit not named (looked for /{x}/)")
            ended_ok = [n for n in survivors if nodes[n][0].returncode == 0]
            if ended_ok and kind != "brown-out":
                problems.append(f"node(s) {ended_ok} exited 0 despite the fault")
        problems += self.leftovers(marker, paths)
        result["problems"] = problems
        result["said"] = {n: t[-600:] for n, t in texts.items()} if problems else None
        return result, problems

    def calibrate_two_nodes(self):
        paths = self.paths("calibrate")
        port = free_port()
        t0 = time.monotonic()
        nodes = [self.start(self.node_command(n, port, paths), "calibrate2", env_extra={"DPB_STORE_TOKEN": "t"})
                 for n in (0, 1)]
        codes = [p.wait(timeout=600) for p, _, _ in nodes]
        self.duration_two_nodes = time.monotonic() - t0
        if any(codes):
            sys.exit("fault campaign: the two-node run without a fault failed:\n" +
                     "".join(e.text() for _, _, e in nodes))
        for k, v in paths.items():  # the previous versions stay those of the one-node run
            with open(v, "wb") as f:
                f.write(self.previous[k])
        print(f"calibration: two nodes of one rank without a fault take {self.duration_two_nodes:.2f} s", flush=True)
