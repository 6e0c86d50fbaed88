"""The fault campaign's tools: which faults there are, reading a run's output, finding
its processes, and the machinery of the faults (a firewall, a full disk, ends of nodes).
Used by fault_campaign.py."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

KINDS = ["sigkill", "sigterm", "sigstop", "hang", "store", "disk-full", "trace-unwritable", "fsize-limit",
         "launcher-killed", "launcher-hup",
         "store-host-killed", "store-refused", "store-wrong-token", "store-blackholed", "stranger-hellos",
         "sigstop-two-nodes", "connection-dropped", "partition",
         "link-down", "node1-killed", "node0-killed", "brown-out"]
# Faults of a job on two network-namespace nodes (scripts/cluster.sh).
NET_NODES = {"link-down", "node1-killed", "node0-killed", "brown-out"}
# Faults of a job of two nodes (two launchers) around the TCP store.
TWO_NODES = {"store-host-killed", "store-refused", "store-wrong-token", "store-blackholed", "stranger-hellos",
             "sigstop-two-nodes", "connection-dropped", "partition"}
NEED_IPTABLES = {"connection-dropped", "partition"}
HEARTBEAT_S = 0.2  # how often a rank publishes its progress to the store (comm/health.h)
# Faults whose effect shows only when the run writes its outputs at the end.
AT_WRITE = {"disk-full", "trace-unwritable", "fsize-limit"}


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


def job_leftovers():
    """What a job may leave outside its outputs: shared-memory segments (/dev/shm/dpb*) and
    launchers' run directories (/tmp/dpbench-run-PID)."""
    found = set()
    try:
        found |= {"/dev/shm/" + f for f in os.listdir("/dev/shm") if f.startswith("dpb")}
    except OSError:
        pass
    found |= {"/tmp/" + f for f in os.listdir("/tmp") if f.startswith("dpbench-run-")}
    return found


def stamp(path):
    """What tells a rewritten file from the one that was there: inode, size, mtime."""
    try:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


def cpu_ticks(pid):
    """The processor time a process has used (clock ticks), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def tcp_ports(pid):
    """Local ports of the TCP sockets a process holds (listening and connected)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                for line in f.read().splitlines()[1:]:
                    parts = line.split()
                    if len(parts) > 9 and parts[9] in inodes:
                        ports.add(int(parts[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Firewall:
    """Blocks a rank's ports with iptables (root only): 'drop' (a partition: packets
    vanish) or 'reset' (connections dropped: RST). Rules are removed after each run."""

    def __init__(self):
        self.cmd = None
        self.rules = []
        if os.geteuid() != 0:
            self.why = "not root"
            return
        for c in ("iptables-legacy", "iptables"):
            if shutil.which(c) and subprocess.run([c, "-L", "INPUT", "-n"], stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL).returncode == 0:
                self.cmd = c
                break
        self.why = "" if self.cmd else "no usable iptables"

    def block(self, ports, how):
        target = ["DROP"] if how == "drop" else ["REJECT", "--reject-with", "tcp-reset"]
        for port in sorted(ports):
            for side in ("--dport", "--sport"):
                rule = ["INPUT", "-p", "tcp", side, str(port), "-j", *target]
                if subprocess.run([self.cmd, "-I", *rule], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode == 0:
                    self.rules.append(rule)
        return bool(self.rules)

    def clear(self):
        for rule in self.rules:
            subprocess.run([self.cmd, "-D", *rule], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.rules = []


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
    """Fills the file system holding `path`; True once it is full (ENOSPC)."""
    import errno
    try:
        with open(os.path.join(path, "filler"), "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError as e:
        return e.errno == errno.ENOSPC


def end_nodes(nodes):
    """The nodes still running are hung: killed. Returns (hung node ids, when all had ended,
    {node: what it printed})."""
    hung = [n for n, (p, _, _) in nodes.items() if p.poll() is None]
    for n in hung:
        os.killpg(nodes[n][0].pid, signal.SIGKILL)
        nodes[n][0].wait()
    end = time.monotonic()
    texts = {}
    for n, (p, out, err) in nodes.items():
        out.thread.join(5)
        err.thread.join(5)
        texts[n] = out.text() + err.text()
    return hung, end, texts


class Blackhole:
    """A TCP address that never answers: a socket listening with the shortest accept queue,
    filled by connections nobody accepts, so the kernel drops every further SYN (as a
    firewall or a host that vanished would). Needs nothing but a port."""

    def __init__(self):
        import socket
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.fill = []
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self.fill.append(s)
        time.sleep(0.1)

    def close(self):
        for s in self.fill:
            s.close()
        self.listener.close()


class Strangers:
    """Connections to a job's TCP store from outside the job, which never say the token:
    half send a hello that claims a 16 MiB value and stream it as fast as they can, half
    trickle theirs one byte every 50 ms. Counts how many the store cut off."""

    def __init__(self, host, port, count=70):
        import socket
        import struct
        key = b"dpbench-store/1"
        self.header = struct.pack("<BI", 5, len(key)) + key + struct.pack("<I", (16 << 20) - 4)
        self.stop_flag = threading.Event()
        self.cut = 0
        self.opened = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._one, args=(socket, host, port, k % 2 == 0), daemon=True)
                        for k in range(count)]
        for t in self.threads:
            t.start()

    def _one(self, socket, host, port, fast):
        try:
            s = socket.create_connection((host, port), timeout=2)
        except OSError:
            return
        with self.lock:
            self.opened += 1
        s.settimeout(0.5)
        chunk = b"x" * (1 << 20) if fast else b"x"
        data = self.header
        try:
            while not self.stop_flag.is_set():
                try:
                    s.sendall(data)
                except TimeoutError:  # the store reads no more for now; not cut off
                    continue
                data = chunk
                if not fast:
                    time.sleep(0.05)
        except OSError:  # the store closed it (a reset, or a pipe that no longer goes)
            with self.lock:
                self.cut += 1
        finally:
            s.close()

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(3)
