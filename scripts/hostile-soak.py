#!/usr/bin/env python3
"""Hostile-peer soak: the agent's memory and a normal client's latency under 1,000 hostile
connections. Run through scripts/hostile-soak; see docs/RELIABILITY.md ("Hostile peers").

Phases: a quiet baseline (one normal client, pipelining nothing: one GET at a time over cached
keys), then the same client while 1,000 hostile connections run: a third send METRICS until the
socket is full, half-close and never read; a third pipeline GETs and never read; a third connect
and sit idle. Hostile connections the agent closes are opened again at once. Beside them,
each in processes of their own:

- --stats-floods peers (default 1) pipeline STATS as fast as the agent answers and read every
  reply (the peer that would hold the socket loop if a connection's work were not bounded per
  turn);
- --drip-peers (default 8) ask, one GET at a time, for new ids of the kind `drip`, whose
  provider (a local server) sends its head and then one body byte every 2 s: each fetch ends at
  the kind's 2 s time-out;
- --tricklers (default 16) connect to the metrics listener and send their request a byte every
  5 s, while one scraper scrapes once a second.

The GCE metadata endpoint's attackers, as the soak's own uid, which no entry allows (the entry
`fleet-admin` is allowed to uid 65534 only):

- --metadata-drippers (default 64) connections each send a whole request head promising a 16,000
  byte body, then one body byte a second, and reconnect when closed;
- --metadata-floods (default 2) processes send 100 pipelined token requests a connection (each a
  403) and read every answer, over and over;
- --metadata-pipeliners (default 1) send three whole requests in one write and read the three
  answers, over and over (counted: a burst that got any answer must get all three; one whose
  connection was closed first, to make room, is not counted).

Beside them, when the soak runs as root, an allowed user (a process as uid 65534) asks the
endpoint once a second for its service accounts: at least 80% must be answered 200. The agent's
log must hold at most 50 lines of refusals a minute.

The agent's `vehicle` tokens come from a local provider that answers at once (the normal client's
keys are cached before the baseline, so its speed does not matter). Prints one JSON report; exit
status 0 when the agent's peak RSS stayed under --max-rss-mib, the normal client's p99 under load
stayed within --max-p99-ratio of the baseline's, every drip GET ended in time, and at least 90% of
the scrapes got through.
"""

import argparse
import array
import http.server
import json
import multiprocessing
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import proc_status, raise_fd_limit  # noqa: E402  (the soak's helpers, one copy)


def rss_bytes(pid: int) -> int:
    return proc_status(pid)["VmRSS"] * 1024


class MemoryGroup:
    """A memory cgroup of its own for the agent (v2 under /sys/fs/cgroup or /sys/fs/cgroup/unified
    with the memory controller, else v1 under /sys/fs/cgroup/memory), so what the kernel charges
    it (shared memory and socket buffers too) can be read; absent when neither can be made."""

    def __init__(self, pid: int) -> None:
        self.usage_path = None
        name = f"ftd-hostile-{os.getpid()}"
        for root, usage in (("/sys/fs/cgroup", "memory.current"), ("/sys/fs/cgroup/memory", "memory.usage_in_bytes")):
            try:
                if usage == "memory.current" and "memory" not in open(f"{root}/cgroup.controllers").read():
                    continue
                self.directory = os.path.join(root, name)
                os.makedirs(self.directory, exist_ok=True)
                with open(os.path.join(self.directory, "cgroup.procs"), "w") as procs:
                    procs.write(str(pid))
                self.usage_path = os.path.join(self.directory, usage)
                return
            except OSError:
                continue

    def usage(self) -> int:
        if self.usage_path is None:
            return 0
        with open(self.usage_path) as usage:
            return int(usage.read())

    def remove(self) -> None:
        if self.usage_path is not None:
            try:
                os.rmdir(self.directory)
            except OSError:
                pass


def connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.setblocking(False)
    return sock


HOSTILE_STYLES = ("half-closed", "pipelining", "idle")


class Hostile:
    """One hostile connection of a given style, reopened whenever the agent closes it."""

    METRICS = b"METRICS\n" * 2048
    GETS = b"GET vehicle v-1\n" * 1024

    def __init__(self, path: str, style: str) -> None:
        self.path, self.style = path, style
        self.reopened = 0
        self.open()

    def open(self) -> None:
        self.sock = connect(self.path)
        self.half_closed = False

    def step(self) -> None:
        """Sends what its style sends, without ever reading; reopens a closed connection."""
        try:
            if self.style == "half-closed" and not self.half_closed:
                while True:
                    if self.sock.send(self.METRICS) <= 0:
                        break
            elif self.style == "pipelining":
                while True:
                    if self.sock.send(self.GETS) <= 0:
                        break
        except BlockingIOError:
            if self.style == "half-closed":
                self.sock.shutdown(socket.SHUT_WR)
                self.half_closed = True
        except OSError:
            self.reopen()
            return
        poller = select.poll()
        poller.register(self.sock, select.POLLHUP | select.POLLERR)
        if any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0)):
            self.reopen()

    def reopen(self) -> None:
        self.sock.close()
        self.reopened += 1
        self.open()


class QuietHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # noqa: D401  (the soak prints one report only)
        pass


class FastProvider(QuietHandler):
    """An opaque token for any id, valid for an hour."""

    def do_GET(self) -> None:
        body = json.dumps({"token": "opaque-" + self.path.strip("/").replace("/", "-"), "expires_in": 3600}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class DripProvider(QuietHandler):
    """Sends its head at once, then one body byte every 2 s, until the client hangs up."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "4096")
        self.end_headers()
        try:
            for _ in range(4096):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(2)
        except OSError:
            pass


def serve(handler) -> int:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def drip_peer(path: str, stop, ended, late, index: int) -> None:
    """One GET at a time for new ids of `drip`; counts replies, and those later than 10 s."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    reader = sock.makefile("rb")
    number = 0
    while not stop.is_set():
        started = time.monotonic()
        sock.sendall(f"GET drip d-{index}-{number}\n".encode())
        line = reader.readline()
        if not line:
            return
        with ended.get_lock():
            ended.value += 1
        if time.monotonic() - started > 10:
            with late.get_lock():
                late.value += 1
        number += 1


def trickler(port: int, stop) -> None:
    """Connects to the metrics listener and sends a request a byte every 5 s; reconnects when closed."""
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    while not stop.is_set():
        try:
            sock = socket.create_connection(("127.0.0.1", port))
            for byte in request:
                if stop.wait(5):
                    return
                sock.send(bytes([byte]))
        except OSError:
            time.sleep(0.1)


def scraper(port: int, stop, scrapes, answered) -> None:
    """Scrapes once a second; counts the scrapes and those answered with the exposition."""
    while not stop.wait(1):
        with scrapes.get_lock():
            scrapes.value += 1
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                if b"fleet_tokend_healthy" in reply.read():
                    with answered.get_lock():
                        answered.value += 1
        except OSError:
            pass


METADATA_TOKEN = "/computeMetadata/v1/instance/service-accounts/default/token"


def metadata_request(port: int, path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nMetadata-Flavor: Google\r\n{extra}\r\n".encode()


def metadata_drippers(port: int, connections: int, stop, reopened) -> None:
    """`connections` connections each sending a whole head with `Content-Length: 16000`, then a body
    byte a second; a connection the agent closes is opened again at once."""
    head = metadata_request(port, METADATA_TOKEN, "Content-Length: 16000\r\n")

    def open_one():
        try:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(head)
            sock.setblocking(False)
            return sock
        except OSError:
            return None

    socks = [open_one() for _ in range(connections)]
    while not stop.is_set():
        for index, sock in enumerate(socks):
            if sock is None:
                socks[index] = open_one()
                continue
            try:
                if select.select([sock], [], [], 0)[0]:
                    raise OSError("closed")
                sock.send(b"a")
            except OSError:
                sock.close()
                socks[index] = open_one()
                with reopened.get_lock():
                    reopened.value += 1
        stop.wait(1)
    for sock in socks:
        if sock is not None:
            sock.close()


def read_answers(sock: socket.socket, count: int) -> int:
    """Reads `count` HTTP answers (each with a Content-Length); how many came before a close."""
    buffer, answered = b"", 0
    while answered < count:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end].decode("latin-1").lower()
            length = int(head.split("content-length:")[1].split("\r\n")[0]) if "content-length:" in head else 0
            if len(buffer) >= end + 4 + length:
                buffer = buffer[end + 4 + length :]
                answered += 1
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        buffer += chunk
    return answered


def metadata_flood(port: int, stop, refusals) -> None:
    """100 pipelined token requests a connection (each a 403: this uid is no entry's), read, again."""
    burst = metadata_request(port, METADATA_TOKEN) * 100
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(burst)
                answered = read_answers(sock, 100)
            with refusals.get_lock():
                refusals.value += answered
        except OSError:
            time.sleep(0.1)


def metadata_pipeliner(port: int, stop, sent, answered) -> None:
    """Three whole requests in one write, then their three answers, on one kept-alive connection."""
    burst = metadata_request(port, "/") * 3
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                for _ in range(30):
                    if stop.is_set():
                        break
                    sock.sendall(burst)
                    got = read_answers(sock, 3)
                    if got == 0:
                        break  # closed to make room before the burst came: this uid is no entry's
                    with sent.get_lock():
                        sent.value += 3
                    with answered.get_lock():
                        answered.value += got
                    if got < 3:
                        break
        except OSError:
            time.sleep(0.1)


def metadata_allowed_user(port: int, stop, tried, answered) -> None:
    """As uid 65534 (the entry's user): asks for its service accounts once a second."""
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    path = "/computeMetadata/v1/instance/service-accounts/"
    while not stop.wait(1):
        with tried.get_lock():
            tried.value += 1
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Metadata-Flavor": "Google"})
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(request, timeout=10) as reply:
                if reply.status == 200 and b"default/" in reply.read():
                    with answered.get_lock():
                        answered.value += 1
        except OSError:
            pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stats_flood(path: str, stop, replies) -> None:
    """Pipelines STATS 4,096 at a time and reads every reply, until `stop` (a process of its own, so
    the normal client's timing does not share an interpreter with it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    burst = b"STATS\n" * 4096
    while not stop.is_set():
        sock.sendall(burst)
        owed = 4096
        pending = b""
        while owed > 0:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return
            pending += chunk
            lines = pending.count(b"\n")
            owed -= lines
            with replies.get_lock():
                replies.value += lines
            pending = pending[pending.rfind(b"\n") + 1 :]
    sock.close()


def warm(path: str, keys: int) -> None:
    """Asks for every key at once on one connection and waits for every token."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    reader = sock.makefile("rb")
    sock.sendall("".join(f"GET vehicle n-{index}\n" for index in range(keys)).encode())
    for _ in range(keys):
        line = reader.readline()
        if not line.startswith(b"OK "):
            raise SystemExit(f"warming got {line!r}")
    sock.close()


def normal_client(path: str, seconds: float, keys: int) -> list[float]:
    """One GET at a time over `keys` cached keys for `seconds`, in a process of its own (no other
    Python thread shares its interpreter, so what it times is the agent): each reply's latency,
    seconds."""
    with tempfile.NamedTemporaryFile(prefix="ftd-hostile-latencies-") as output:
        child = multiprocessing.Process(target=time_gets, args=(path, seconds, keys, output.name))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"the normal client ended with status {child.exitcode}")
        latencies = array.array("d")
        latencies.frombytes(output.read())
        return latencies.tolist()


def time_gets(path: str, seconds: float, keys: int, output: str) -> None:
    """The normal client's body: times each GET and writes the latencies to `output`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    reader = sock.makefile("rb")
    latencies, index, end = array.array("d"), 0, time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        sock.sendall(f"GET vehicle n-{index % keys}\n".encode())
        line = reader.readline()
        latencies.append(time.perf_counter() - started)
        if not line.startswith(b"OK "):
            raise SystemExit(f"normal client got {line!r}")
        index += 1
    sock.close()
    with open(output, "wb") as file:
        latencies.tofile(file)


def drive_hostiles(path: str, connections: int, stop, reopened) -> None:
    """Opens `connections` hostile connections, a third of each style, and keeps each at its
    bound until `stop`; then closes them all and counts reopenings by style into `reopened`."""
    hostiles = [Hostile(path, HOSTILE_STYLES[index % 3]) for index in range(connections)]
    while not stop.is_set():
        for hostile in hostiles:
            hostile.step()
        time.sleep(0.1)
    for index, style in enumerate(HOSTILE_STYLES):
        reopened[index] = sum(h.reopened for h in hostiles if h.style == style)
    for hostile in hostiles:
        hostile.sock.close()


def sample_memory(pid: int, usage_path, stop, peak, peak_charged) -> None:
    """Samples the agent's RSS and its cgroup's charge every 0.1 s until `stop`, keeping peaks."""
    while not stop.is_set():
        try:
            peak.value = max(peak.value, rss_bytes(pid))
            if usage_path is not None:
                with open(usage_path) as usage:
                    peak_charged.value = max(peak_charged.value, int(usage.read()))
        except (OSError, KeyError):
            return
        time.sleep(0.1)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--baseline-seconds", type=float, default=20)
    parser.add_argument("--hostile-seconds", type=float, default=90)
    parser.add_argument("--max-rss-mib", type=float, default=256)
    parser.add_argument("--max-p99-ratio", type=float, default=2.0)
    parser.add_argument("--stats-floods", type=int, default=1)
    parser.add_argument("--drip-peers", type=int, default=8)
    parser.add_argument("--tricklers", type=int, default=16)
    parser.add_argument("--metadata-drippers", type=int, default=64)
    parser.add_argument("--metadata-floods", type=int, default=2)
    parser.add_argument("--metadata-pipeliners", type=int, default=1)
    args = parser.parse_args()

    raise_fd_limit(8192)
    directory = tempfile.mkdtemp(prefix="ftd-hostile-")
    path = os.path.join(directory, "agent.sock")
    log = open(os.path.join(directory, "agent.log"), "wb")
    fast_port, drip_port, metrics_port = serve(FastProvider), serve(DripProvider), free_port()
    metadata_port = free_port()
    config = os.path.join(directory, "config.json")
    with open(config, "w") as file:
        json.dump(
            {
                "providers": {
                    "vehicle": {"url": f"http://127.0.0.1:{fast_port}/{{id}}", "timeout": 10},
                    "drip": {"url": f"http://127.0.0.1:{drip_port}/{{id}}", "timeout": 2},
                },
                "metrics_listen": f"127.0.0.1:{metrics_port}",
                # No IAM behind it: the soak's metadata traffic never reaches a token.
                "iam_endpoint": f"http://127.0.0.1:{free_port()}",
                "access_tokens": {
                    "fleet-admin": {
                        "service_account": "fleet-admin@soak-project.iam.gserviceaccount.com",
                        "allow": {"users": [65534]},
                    }
                },
                "metadata_server": {"listen": f"127.0.0.1:{metadata_port}", "default": "fleet-admin"},
            },
            file,
        )
    environment = dict(os.environ, GOOGLE_APPLICATION_CREDENTIALS="", GCE_METADATA_HOST=f"127.0.0.1:{free_port()}")
    agent = subprocess.Popen(
        [
            args.binary, "serve", "--socket", path, "--config", config,
            "--max-connections", str(args.connections + args.stats_floods + args.drip_peers + 64),
        ],
        stdout=log, stderr=log, env=environment,
    )
    try:
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.05)
        time.sleep(0.5)
        group = MemoryGroup(agent.pid)
        keys = 1000
        warm(path, keys)  # every key cached: the normal client's GETs are hits
        idle_rss = rss_bytes(agent.pid)
        idle_charged = group.usage()
        baseline = normal_client(path, args.baseline_seconds, keys)

        stop = multiprocessing.Event()
        reopened = multiprocessing.Array("q", len(HOSTILE_STYLES))
        peak = multiprocessing.Value("q", idle_rss)
        peak_charged = multiprocessing.Value("q", idle_charged)
        driver = multiprocessing.Process(target=drive_hostiles, args=(path, args.connections, stop, reopened))
        sampler = multiprocessing.Process(
            target=sample_memory, args=(agent.pid, group.usage_path, stop, peak, peak_charged)
        )
        driver.start()
        sampler.start()
        flood_stop = multiprocessing.Event()
        flood_replies = multiprocessing.Value("q", 0)
        drip_ended, drip_late = multiprocessing.Value("q", 0), multiprocessing.Value("q", 0)
        scrapes, scrapes_answered = multiprocessing.Value("q", 0), multiprocessing.Value("q", 0)
        floods = [
            multiprocessing.Process(target=stats_flood, args=(path, flood_stop, flood_replies), daemon=True)
            for _ in range(args.stats_floods)
        ]
        floods += [
            multiprocessing.Process(target=drip_peer, args=(path, flood_stop, drip_ended, drip_late, index), daemon=True)
            for index in range(args.drip_peers)
        ]
        floods += [
            multiprocessing.Process(target=trickler, args=(metrics_port, flood_stop), daemon=True)
            for _ in range(args.tricklers)
        ]
        floods.append(
            multiprocessing.Process(target=scraper, args=(metrics_port, flood_stop, scrapes, scrapes_answered), daemon=True)
        )
        metadata_reopened, metadata_refusals = multiprocessing.Value("q", 0), multiprocessing.Value("q", 0)
        pipelined_sent, pipelined_answered = multiprocessing.Value("q", 0), multiprocessing.Value("q", 0)
        allowed_tried, allowed_answered = multiprocessing.Value("q", 0), multiprocessing.Value("q", 0)
        if args.metadata_drippers:
            floods.append(
                multiprocessing.Process(
                    target=metadata_drippers,
                    args=(metadata_port, args.metadata_drippers, flood_stop, metadata_reopened),
                    daemon=True,
                )
            )
        floods += [
            multiprocessing.Process(target=metadata_flood, args=(metadata_port, flood_stop, metadata_refusals), daemon=True)
            for _ in range(args.metadata_floods)
        ]
        floods += [
            multiprocessing.Process(
                target=metadata_pipeliner,
                args=(metadata_port, flood_stop, pipelined_sent, pipelined_answered),
                daemon=True,
            )
            for _ in range(args.metadata_pipeliners)
        ]
        as_root = os.getuid() == 0
        if as_root:
            floods.append(
                multiprocessing.Process(
                    target=metadata_allowed_user,
                    args=(metadata_port, flood_stop, allowed_tried, allowed_answered),
                    daemon=True,
                )
            )
        for flood in floods:
            flood.start()
        time.sleep(2)  # every hostile connection at its bound
        loaded = normal_client(path, args.hostile_seconds, keys)
        stop.set()
        flood_stop.set()
        driver.join()
        sampler.join()
        for flood in floods:
            flood.join(timeout=30)
            if flood.is_alive():
                flood.terminate()
        loaded_rss = rss_bytes(agent.pid)
        peak.value = max(peak.value, loaded_rss)
        time.sleep(2)
        after_rss = rss_bytes(agent.pid)
        alive = agent.poll() is None
        log.flush()
        with open(os.path.join(directory, "agent.log"), "rb") as written:
            agent_log = written.read().decode("utf-8", "replace").splitlines()
        refusal_lines = sum(
            1
            for line in agent_log
            if "metadata endpoint: request refused" in line or "metadata endpoint: refusals left out" in line
        )
        minutes = max(args.hostile_seconds / 60, 1 / 60)

        report = {
            "connections": args.connections,
            "hostile_seconds": args.hostile_seconds,
            "rss_mib": {
                "idle": round(idle_rss / 2**20, 1),
                "peak": round(peak.value / 2**20, 1),
                "at_end_of_load": round(loaded_rss / 2**20, 1),
                "after_close": round(after_rss / 2**20, 1),
            },
            "cgroup_charged_mib": {
                "idle": round(idle_charged / 2**20, 1),
                "peak": round(peak_charged.value / 2**20, 1),
            }
            if group.usage_path
            else None,
            "stats_flood_replies": flood_replies.value,
            "drip_gets": {"answered": drip_ended.value, "later_than_10_s": drip_late.value},
            "scrapes": {"tried": scrapes.value, "answered": scrapes_answered.value},
            "metadata": {
                "dripping_connections_reopened": metadata_reopened.value,
                "flood_refusals_answered": metadata_refusals.value,
                "refusal_log_lines": refusal_lines,
                "refusal_log_lines_per_minute": round(refusal_lines / minutes, 1),
                "pipelined": {"sent": pipelined_sent.value, "answered": pipelined_answered.value},
                "allowed_user": {"tried": allowed_tried.value, "answered": allowed_answered.value}
                if as_root
                else None,
            },
            "reopened_by_style": {
                style: reopened[index] for index, style in enumerate(HOSTILE_STYLES)
            },
            "normal_client": {
                "baseline_replies": len(baseline),
                "baseline_p50_us": round(percentile(baseline, 0.5) * 1e6),
                "baseline_p99_us": round(percentile(baseline, 0.99) * 1e6),
                "loaded_replies": len(loaded),
                "loaded_p50_us": round(percentile(loaded, 0.5) * 1e6),
                "loaded_p99_us": round(percentile(loaded, 0.99) * 1e6),
            },
            "agent_alive": alive,
        }
        ratio = percentile(loaded, 0.99) / percentile(baseline, 0.99)
        report["p99_ratio"] = round(ratio, 2)
        report["pass"] = (
            alive
            and peak.value / 2**20 <= args.max_rss_mib
            and ratio <= args.max_p99_ratio
            and drip_late.value == 0
            and (args.drip_peers == 0 or drip_ended.value > 0)
            and scrapes_answered.value >= 0.9 * scrapes.value
            and refusal_lines / minutes <= 50
            and pipelined_sent.value == pipelined_answered.value
            and (not as_root or allowed_answered.value >= 0.8 * allowed_tried.value)
        )
        print(json.dumps(report, indent=2))
        return 0 if report["pass"] else 1
    finally:
        agent.terminate()
        agent.wait(timeout=20)
        if "group" in locals():
            group.remove()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
