#!/usr/bin/env python3
"""Soak test of fleet-tokend against a flapping fake token provider.

Run it through `bash scripts/soak [minutes]` (see docs/RELIABILITY.md, section Soak). Python 3.11,
standard library only. Everything runs on loopback TCP and a Unix socket in a temporary directory.

One process, three parts:

* a fake HTTP token provider (a child process running `soak.py provider`) on 127.0.0.1 that rotates
  every 20 s through healthy, slow (every reply after 2 s), down (HTTP 503, then connections
  refused) and garbage (unusable replies, tokens for another id, expired or nearly expired tokens);
* the agent under test, `fleet-tokend serve`, pointed at that provider;
* 1,000 client connections in a closed loop over 10,000 keys, checking every reply, and a sampler
  of the agent's memory and file descriptors.

Exit status: 0 when every check held, 1 when an invariant broke (a token for another id, a token
with under 10 s left when the agent picked it or when the reply arrived, a malformed or
out-of-order reply, a file-descriptor leak) or the agent died, 2 when the run could not be set up.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import collections
import ctypes
import datetime
import json
import os
import random
import re
import resource
import signal
import sys
import time
import urllib.parse

PHASES = ("healthy", "slow", "down", "garbage")
PHASE_SECONDS = 20.0
SLOW_DELAY = 2.0
FLOOR = 10  # the agent never serves a token with under this many seconds left
RECEIPT_ALLOWANCE = 1.0  # seconds allowed for the soak client's own lag in the at-receipt check
KINDS = {"vehicle": ("v", "vehicleid"), "trip": ("t", "tripid")}
IDS_PER_KIND = 5000

PHASE_TEXT = {
    "healthy": "healthy (tokens at once)",
    "slow": f"slow (every reply after {SLOW_DELAY:g} s)",
    "down-503": "down (HTTP 503)",
    "down-refused": "down (listener closed: connection refused)",
    "garbage": "garbage (unusable replies, wrong-id, expired and nearly expired tokens)",
}


def phase_at(t0: float | None, now: float) -> tuple[str, float]:
    """The provider's phase at `now` and the seconds since it began; healthy before the start."""
    if t0 is None or now < t0:
        return "healthy", 0.0
    index = int((now - t0) // PHASE_SECONDS)
    return PHASES[index % len(PHASES)], (now - t0) - index * PHASE_SECONDS


def provider_mode(t0: float | None, now: float) -> str:
    phase, into = phase_at(t0, now)
    if phase == "down":
        return "down-503" if into < PHASE_SECONDS / 2 else "down-refused"
    return phase


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def set_parent_death_signal() -> None:
    """In a child before exec: get SIGTERM if the soak process dies, so nothing is left running."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def raise_fd_limit(want: int = 8192) -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ----------------------------------------------------------------------------------------------
# Fake token provider (child process)
# ----------------------------------------------------------------------------------------------

JWT_HEADER = b64url(b'{"alg":"RS256","typ":"JWT"}')
REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}
GARBAGE_VARIANTS = (
    "truncated-json",     # a JSON reply cut in half
    "html",               # 200 with an HTML error page
    "empty",              # 200 with an empty body
    "text-with-spaces",   # 200 text/plain that is not a token
    "wrong-id",           # a well-formed token whose authorization claim names another id
    "expired",            # a token whose exp has passed, with an expires_in that lies
    "under-floor",        # a token with 5 s left (under the 10 s serving floor)
    "no-expiry",          # a JWT without exp and no expiry field
    "barely-valid",       # a valid token with 12 to 15 s left: servable for a few seconds only
)


class FakeProvider:
    def __init__(self, port: int, lifetime_min: int, lifetime_max: int) -> None:
        self.port = port
        self.lifetime_min = lifetime_min
        self.lifetime_max = lifetime_max
        self.t0: float | None = None
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.counts: collections.Counter[str] = collections.Counter()
        self.serial = 0
        self.garbage_turn = 0
        self.done = asyncio.Event()

    def mint(self, kind: str, ident: str, now: float, lifetime: int | None,
             claim_id: str | None = None) -> tuple[str, int]:
        self.serial += 1
        iat = int(now)
        payload: dict[str, object] = {
            "iss": "soak-provider@fleet-tokend.invalid",
            "iat": iat,
            "authorization": {KINDS[kind][1]: claim_id if claim_id is not None else ident},
            "jti": str(self.serial),
        }
        exp = iat + lifetime if lifetime is not None else 0
        if lifetime is not None:
            payload["exp"] = exp
        body = b64url(json.dumps(payload, separators=(",", ":")).encode())
        return f"{JWT_HEADER}.{body}.{b64url(os.urandom(32))}", exp

    def healthy_reply(self, kind: str, ident: str, now: float) -> tuple[int, str, bytes]:
        lifetime = random.randint(self.lifetime_min, self.lifetime_max)
        token, exp = self.mint(kind, ident, now, lifetime)
        r = random.random()
        if r < 0.8:
            doc = {"token": token, "expires_in": lifetime}
            self.counts["token:expires_in"] += 1
        elif r < 0.9:  # the stated expiry lies by a minute: the JWT's exp must bound it
            doc = {"token": token, "expires_in": lifetime + 60}
            self.counts["token:expires_in-overstated"] += 1
        else:
            doc = {"jwt": token, "expiration": exp}
            self.counts["token:absolute-expiration"] += 1
        self.counts["tokens_minted"] += 1
        return 200, "application/json", json.dumps(doc).encode()

    def garbage_reply(self, kind: str, ident: str, now: float) -> tuple[int, str, bytes]:
        variant = GARBAGE_VARIANTS[self.garbage_turn % len(GARBAGE_VARIANTS)]
        self.garbage_turn += 1
        self.counts["garbage:" + variant] += 1
        if variant == "truncated-json":
            token, _ = self.mint(kind, ident, now, 120)
            text = json.dumps({"token": token, "expires_in": 120})
            return 200, "application/json", text[: len(text) // 2].encode()
        if variant == "html":
            return 200, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        if variant == "empty":
            return 200, "application/json", b""
        if variant == "text-with-spaces":
            return 200, "text/plain", b"token service is warming up, try later"
        if variant == "wrong-id":
            token, _ = self.mint(kind, ident, now, 120, claim_id=ident + "-other")
            return 200, "application/json", json.dumps({"token": token, "expires_in": 120}).encode()
        if variant == "expired":
            token, _ = self.mint(kind, ident, now - 200, 150)
            return 200, "application/json", json.dumps({"token": token, "expires_in": 150}).encode()
        if variant == "under-floor":
            token, _ = self.mint(kind, ident, now, 5)
            return 200, "application/json", json.dumps({"token": token, "expires_in": 5}).encode()
        if variant == "no-expiry":
            token, _ = self.mint(kind, ident, now, None)
            return 200, "application/json", json.dumps({"token": token}).encode()
        lifetime = random.randint(12, 15)  # barely-valid
        token, _ = self.mint(kind, ident, now, lifetime)
        return 200, "application/json", json.dumps({"token": token, "expires_in": lifetime}).encode()

    async def reply(self, target: str) -> tuple[int, str, bytes] | None:
        parts = target.split("?", 1)[0].split("/")
        if len(parts) != 4 or parts[1] != "token" or parts[2] not in KINDS:
            self.counts["not-found"] += 1
            return 404, "text/plain", b"no such token endpoint"
        kind, ident = parts[2], urllib.parse.unquote(parts[3])
        mode = provider_mode(self.t0, time.time())
        self.counts["requests:" + mode] += 1
        if mode == "slow":
            await asyncio.sleep(SLOW_DELAY)
            return self.healthy_reply(kind, ident, time.time())
        if mode == "down-503":
            return 503, "text/plain", b"token provider down (soak)"
        if mode == "down-refused":
            return None  # raced with the listener closing: drop the connection
        if mode == "garbage":
            return self.garbage_reply(kind, ident, time.time())
        return self.healthy_reply(kind, ident, time.time())

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        self.counts["connections"] += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                request = lines[0].split(" ")
                headers = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                keep_alive = headers.get("connection", "").lower() != "close"
                result = await self.reply(request[1] if len(request) > 1 else "/")
                if result is None:
                    writer.transport.abort()
                    return
                status, content_type, body = result
                head_out = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                            f"Content-Length: {len(body)}\r\n"
                            + ("" if keep_alive else "Connection: close\r\n") + "\r\n")
                writer.write(head_out.encode("latin-1") + body)
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, OSError):
            return
        finally:
            self.writers.discard(writer)
            writer.close()

    async def listen(self) -> None:
        while True:
            try:
                self.server = await asyncio.start_server(self.handle, "127.0.0.1", self.port,
                                                         reuse_address=True, backlog=512)
                self.port = self.server.sockets[0].getsockname()[1]
                return
            except OSError as error:
                print(f"LOG re-listen on port {self.port} failed: {error}; retrying", flush=True)
                await asyncio.sleep(0.1)

    def unlisten(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for writer in list(self.writers):
            writer.transport.abort()

    async def drive_phases(self) -> None:
        mode = provider_mode(self.t0, time.time())
        while not self.done.is_set():
            now = time.time()
            new = provider_mode(self.t0, now)
            if new != mode:
                if new == "down-refused":
                    self.unlisten()
                elif mode == "down-refused":
                    await self.listen()
                mode = new
                self.counts["phase-changes"] += 1
                print(f"PHASE {new} {now:.3f}", flush=True)
            await asyncio.sleep(0.05)

    async def control(self) -> None:
        """Lines on stdin: `start <t0>` starts the phase clock, `stop` (or end of input) ends."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = (await reader.readline()).decode().split()
            if not line or line[0] == "stop":
                self.done.set()
                return
            if line[0] == "start":
                self.t0 = float(line[1])

    async def run(self, stats_path: str) -> None:
        await self.listen()
        print(f"PORT {self.port}", flush=True)
        phases = asyncio.create_task(self.drive_phases())
        await self.control()
        phases.cancel()
        self.unlisten()
        with open(stats_path, "w") as out:
            json.dump(dict(sorted(self.counts.items())), out, indent=1)


def provider_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="soak.py provider")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifetime-min", type=int, default=90)
    parser.add_argument("--lifetime-max", type=int, default=180)
    parser.add_argument("--stats", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the soak process stops us through stdin
    raise_fd_limit()
    asyncio.run(FakeProvider(args.port, args.lifetime_min, args.lifetime_max).run(args.stats))
    return 0


# ----------------------------------------------------------------------------------------------
# Agent process sampling
# ----------------------------------------------------------------------------------------------

def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in KiB."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                values[key] = int(value.split()[0])
    return values


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds every CPU of the machine has spent busy (not idle or iowait) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_inodes(path: str, column: int) -> set[str]:
    inodes = set()
    try:
        with open(path) as table:
            next(table)
            for line in table:
                fields = line.split()
                if len(fields) > column:
                    inodes.add(fields[column])
    except OSError:
        pass
    return inodes


def fd_breakdown(pid: int) -> dict[str, int]:
    """Open fds of `pid` by type: unix and tcp sockets, anon inodes (epoll, eventfd), pipes, files."""
    unix = socket_inodes("/proc/net/unix", 6)
    tcp = socket_inodes("/proc/net/tcp", 9) | socket_inodes("/proc/net/tcp6", 9)
    kinds: collections.Counter[str] = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inode = target[8:-1]
            kinds["unix" if inode in unix else "tcp" if inode in tcp else "other-socket"] += 1
        elif target.startswith("anon_inode:"):
            kinds["anon-inode"] += 1
        elif target.startswith("pipe:"):
            kinds["pipe"] += 1
        else:
            kinds["file"] += 1
    kinds["total"] = sum(kinds.values())
    return dict(sorted(kinds.items()))


# ----------------------------------------------------------------------------------------------
# The soak run
# ----------------------------------------------------------------------------------------------

# Counters that must stay 0 (each one fails the run).
BAD_KEYS = ("wrong_id", "under_floor_exp", "under_floor_expires_at", "under_floor_at_receipt",
            "expires_at_after_exp", "malformed_replies", "order_problems")
LATENCY_BOUNDS_MS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
                     30000, 60000)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.duration = args.minutes * 60.0
        self.dir = args.dir
        self.socket_path = os.path.join(self.dir, "tokens.sock")
        self.agent: asyncio.subprocess.Process | None = None
        self.provider: asyncio.subprocess.Process | None = None
        self.provider_port = 0
        self.agent_args: list[str] = []
        self.t0: float | None = None
        self.stopping = False
        self.close_now = asyncio.Event()
        self.go = asyncio.Event()
        self.drained = 0
        self.stop_early = asyncio.Event()
        self.agent_died: str | None = None
        self.agent_exit: int | None = None
        self.counts: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.error_texts: collections.Counter[str] = collections.Counter()
        self.by_phase: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.samples_bad: list[dict[str, object]] = []
        self.latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        self.latency_max = 0.0
        self.min_left_at_receipt: float | None = None
        self.token_info: dict[bytes, tuple[str, str, int] | None] = {}
        self.open_connections = 0
        self.samples: list[dict[str, float]] = []
        self.rss_max_kib = 0
        self.loop_lag_max = 0.0
        self.loop_lag_sum = 0.0
        self.loop_lag_n = 0
        self.fds_max = 0
        self.snapshots: dict[str, dict[str, int]] = {}
        self.rss_at: dict[str, int] = {}
        self.stats_at: dict[str, dict[str, str]] = {}
        self.phase_log: list[str] = []
        self.control: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    # -- output -----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        elapsed = "" if self.t0 is None else f"[{time.time() - self.t0:6.0f} s] "
        print(f"soak: {elapsed}{text}", flush=True)

    # -- processes --------------------------------------------------------------------------

    async def start_provider(self) -> None:
        self.provider = await asyncio.create_subprocess_exec(
            sys.executable, os.path.abspath(__file__), "provider",
            "--lifetime-min", str(self.args.lifetime_min), "--lifetime-max", str(self.args.lifetime_max),
            "--stats", os.path.join(self.dir, "provider-stats.json"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            preexec_fn=set_parent_death_signal)
        assert self.provider.stdout is not None
        line = (await asyncio.wait_for(self.provider.stdout.readline(), 10)).decode().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"fake provider did not start: {line!r}")
        self.provider_port = int(line[1])
        asyncio.create_task(self.forward_provider_output())

    async def forward_provider_output(self) -> None:
        assert self.provider is not None and self.provider.stdout is not None
        while True:
            line = await self.provider.stdout.readline()
            if not line:
                return
            fields = line.decode().split()
            if fields and fields[0] == "PHASE":
                self.phase_log.append(f"{float(fields[2]) - (self.t0 or 0):.1f} {fields[1]}")
                self.say(f"provider phase -> {PHASE_TEXT.get(fields[1], fields[1])}")
            else:
                self.say("provider: " + line.decode().rstrip())

    def agent_help_has(self, flag: str) -> bool:
        import subprocess
        try:
            text = subprocess.run([self.args.binary, "serve", "--help"], capture_output=True,
                                  text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return False
        return flag in text

    async def start_agent(self) -> None:
        base = f"http://127.0.0.1:{self.provider_port}/token"
        self.agent_args = [
            "serve",
            "--socket", self.socket_path,
            "--socket-mode", "0600",
            "--provider", f"vehicle={base}/vehicle/{{id}}",
            "--provider", f"trip={base}/trip/{{id}}",
            "--max-connections", "2000",
            "--log-level", self.args.agent_log_level,
        ]
        if self.args.max_concurrent_fetches is not None:
            self.agent_args += ["--max-concurrent-fetches", str(self.args.max_concurrent_fetches)]
        if self.args.idle_timeout is not None:
            self.agent_args += ["--idle-timeout", str(self.args.idle_timeout)]
        if self.agent_help_has("--max-connections-per-uid"):
            self.agent_args += ["--max-connections-per-uid", "0"]
        log = open(os.path.join(self.dir, "agent.log"), "wb")
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        env.pop("LISTEN_FDS", None)
        env.pop("LISTEN_PID", None)
        self.agent = await asyncio.create_subprocess_exec(
            self.args.binary, *self.agent_args, stdin=asyncio.subprocess.DEVNULL, stdout=log,
            stderr=log, env=env, preexec_fn=set_parent_death_signal)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.agent.returncode is not None:
                raise RuntimeError(f"agent exited with status {self.agent.returncode} at start-up; "
                                   f"see {self.dir}/agent.log")
            try:
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
                writer.write(b"PING\n")
                reply = await asyncio.wait_for(reader.readline(), 5)
                writer.close()
                if reply == b"PONG\n":
                    return
            except (OSError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError("agent did not answer PING within 60 s")

    async def stop_agent(self) -> None:
        agent = self.agent
        if agent is None or agent.returncode is not None:
            return
        agent.send_signal(signal.SIGTERM)
        try:
            self.agent_exit = await asyncio.wait_for(agent.wait(), 15)
        except asyncio.TimeoutError:
            self.say("agent did not stop within 15 s of SIGTERM; killing it")
            agent.kill()
            self.agent_exit = await agent.wait()
            self.counts["agent_killed_after_sigterm"] += 1

    async def stop_provider(self) -> None:
        provider = self.provider
        if provider is None or provider.returncode is not None:
            return
        try:
            assert provider.stdin is not None
            provider.stdin.write(b"stop\n")
            await provider.stdin.drain()
            provider.stdin.close()
            await asyncio.wait_for(provider.wait(), 10)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            provider.kill()
            await provider.wait()

    # -- agent queries ----------------------------------------------------------------------

    async def agent_stats(self) -> dict[str, str]:
        try:
            if self.control is None:
                self.control = await asyncio.open_unix_connection(self.socket_path)
            reader, writer = self.control
            writer.write(b"STATS\n")
            line = (await asyncio.wait_for(reader.readline(), 10)).decode().split()
        except (OSError, asyncio.TimeoutError):
            self.control = None
            return {}
        if not line or line[0] != "OK":
            return {}
        return dict(field.split("=", 1) for field in line[1:] if "=" in field)

    async def close_control(self) -> None:
        if self.control is not None:
            self.control[1].close()
            try:
                await self.control[1].wait_closed()
            except OSError:
                pass
            self.control = None

    # -- clients ----------------------------------------------------------------------------

    def decode(self, token: bytes) -> tuple[str, str, int] | None:
        """(claim name, claim value, exp) of a token, or None when it is not a JWT we can read."""
        info = self.token_info.get(token, False)
        if info is not False:
            return info  # type: ignore[return-value]
        result = None
        parts = token.split(b".")
        if len(parts) == 3:
            try:
                body = parts[1] + b"=" * (-len(parts[1]) % 4)
                payload = json.loads(base64.urlsafe_b64decode(body))
                claims = payload["authorization"]
                for name in ("vehicleid", "tripid"):
                    if name in claims:
                        result = (name, str(claims[name]), int(payload["exp"]))
                        break
            except (ValueError, KeyError, TypeError):
                result = None
        if len(self.token_info) > 300_000:
            self.token_info.clear()
        self.token_info[token] = result
        return result

    def record_bad(self, what: str, **details: object) -> None:
        self.counts[what] += 1
        if len(self.samples_bad) < 50:
            details["what"] = what
            details["t"] = round(time.time() - (self.t0 or 0), 3)
            self.samples_bad.append(details)

    def check(self, request: tuple, line: bytes, pending: collections.deque, t_recv: float) -> None:
        kind, ident, min_validity, t_send = request
        latency = t_recv - t_send
        self.latency[bisect.bisect_left(LATENCY_BOUNDS_MS, latency * 1000)] += 1
        if latency > self.latency_max:
            self.latency_max = latency
        phase = "drain" if self.stopping else phase_at(self.t0, t_recv)[0]
        per_phase = self.by_phase[phase]
        per_phase["replies"] += 1
        self.counts["replies"] += 1
        if kind is None:  # PING
            if line == b"PONG\n":
                self.counts["pong"] += 1
            else:
                self.record_bad("order_problems", request="PING", reply=line[:120].decode("latin-1"))
            return
        fields = line[:-1].split(b" ")
        tag = fields[0]
        if tag == b"OK" and len(fields) == 3:
            info = self.decode(fields[1])
            try:
                expires_at = int(fields[2])
            except ValueError:
                info = None
            if info is None:
                self.record_bad("malformed_replies", request=f"GET {kind} {ident}",
                                reply=line[:120].decode("latin-1"))
                return
            claim, claim_id, exp = info
            if claim != KINDS[kind][1] or claim_id != ident:
                others = {(r[0], r[1]) for r in pending if r[0] is not None}
                other_kind = "vehicle" if claim == "vehicleid" else "trip"
                what = "order_problems" if (other_kind, claim_id) in others else "wrong_id"
                self.record_bad(what, request=f"GET {kind} {ident}", token_claim=f"{claim}={claim_id}")
                per_phase[what] += 1
            # t_send is a lower bound of when the agent decided, so these checks cannot flag a
            # token that had 10 s left at the agent; expires-at is rounded down, hence the + 1.
            if exp < t_send + FLOOR:
                self.record_bad("under_floor_exp", request=f"GET {kind} {ident}",
                                exp_left_at_send=round(exp - t_send, 3), expires_at=expires_at)
                per_phase["under_floor"] += 1
            if expires_at + 1 <= t_send + FLOOR:
                self.record_bad("under_floor_expires_at", request=f"GET {kind} {ident}",
                                expires_at_left_at_send=round(expires_at - t_send, 3))
                per_phase["under_floor"] += 1
            if expires_at > exp:
                self.record_bad("expires_at_after_exp", request=f"GET {kind} {ident}",
                                expires_at=expires_at, exp=exp)
            # At receipt: the token's exact expiry is before expires-at + 1 and not after exp.
            # A token the agent picked with 10 s left but whose reply it held back behind a slow
            # fetch on the same connection arrives with less; the client cannot use it as promised.
            left = min(expires_at + 1, exp) - t_recv
            if self.min_left_at_receipt is None or left < self.min_left_at_receipt:
                self.min_left_at_receipt = left
            if left < FLOOR - RECEIPT_ALLOWANCE:
                self.record_bad("under_floor_at_receipt", request=f"GET {kind} {ident}",
                                left_at_send=round(min(expires_at + 1, exp) - t_send, 3),
                                left_at_receipt=round(left, 3), reply_latency_s=round(latency, 3),
                                phase=phase)
                per_phase["under_floor_at_receipt"] += 1
                if left <= 0:
                    self.counts["expired_at_receipt"] += 1
            if min_validity is not None and expires_at - t_send < min_validity:
                self.counts["ok_below_requested_validity_info"] += 1
            self.counts["ok"] += 1
            per_phase["ok"] += 1
        elif tag == b"ERR" and len(fields) >= 2:
            code = fields[1].decode("latin-1")
            self.errors[code] += 1
            per_phase["err"] += 1
            per_phase["err:" + code] += 1
            text = re.sub(r"[0-9]+(\.[0-9]+)?", "N", line[:-1].decode("latin-1"))
            if len(self.error_texts) < 200 or text in self.error_texts:
                self.error_texts[text] += 1
        elif tag == b"PONG":
            self.record_bad("order_problems", request=f"GET {kind} {ident}", reply="PONG")
        else:
            self.record_bad("malformed_replies", request=f"GET {kind} {ident}",
                            reply=line[:120].decode("latin-1"))

    def next_request(self) -> tuple[bytes, tuple]:
        r = random.random()
        now = time.time()
        if r < 0.01:
            return b"PING\n", (None, None, None, now)
        kind = "vehicle" if random.random() < 0.5 else "trip"
        ident = f"{KINDS[kind][0]}-{random.randrange(IDS_PER_KIND)}"
        if r < 0.06:  # an explicit min-validity on 5% of GETs
            min_validity = random.choice((15, 30, 60))
            return f"GET {kind} {ident} {min_validity}\n".encode(), (kind, ident, min_validity, now)
        return f"GET {kind} {ident}\n".encode(), (kind, ident, None, now)

    async def client(self, number: int, connected: asyncio.Semaphore, ready: list[int]) -> None:
        window = 1 + number % 4  # 1 to 4 requests in flight, spread evenly
        first = True
        while not self.stopping:
            try:
                if first:
                    async with connected:
                        reader, writer = await asyncio.open_unix_connection(self.socket_path,
                                                                            limit=1 << 20)
                else:
                    reader, writer = await asyncio.open_unix_connection(self.socket_path,
                                                                        limit=1 << 20)
            except OSError as error:
                self.counts["connect_errors"] += 1
                self.error_texts[f"connect: {error.strerror or error}"] += 1
                await asyncio.sleep(0.5)
                continue
            if first:
                ready[0] += 1
                first = False
            else:
                self.counts["reconnects"] += 1
            self.open_connections += 1
            pending: collections.deque = collections.deque()
            try:
                await self.go.wait()
                for _ in range(window):
                    line, request = self.next_request()
                    pending.append(request)
                    writer.write(line)
                while pending:
                    line = await reader.readline()
                    t_recv = time.time()
                    if not line.endswith(b"\n"):
                        self.counts["closed_by_agent"] += 1
                        self.counts["lost_requests"] += len(pending)
                        if line:
                            self.record_bad("malformed_replies", reply=line[:120].decode("latin-1"),
                                            note="partial line at end of input")
                        pending.clear()
                        break
                    request = pending.popleft()
                    self.check(request, line, pending, t_recv)
                    if line.startswith(b"ERR busy too many connections"):
                        self.counts["refused_busy_connections"] += 1
                    if not self.stopping:
                        line, request = self.next_request()
                        pending.append(request)
                        writer.write(line)
                if self.stopping and not pending:
                    self.drained += 1
                    await self.close_now.wait()
            except (ConnectionError, OSError) as error:
                self.counts["connection_errors"] += 1
                self.error_texts[f"connection: {type(error).__name__}"] += 1
                self.counts["lost_requests"] += len(pending)
            finally:
                self.open_connections -= 1
                writer.close()
                try:
                    await writer.wait_closed()
                except (ConnectionError, OSError):
                    pass
            if not self.stopping:
                await asyncio.sleep(0.1)

    # -- sampling and progress --------------------------------------------------------------

    async def sampler(self) -> None:
        assert self.agent is not None
        pid = self.agent.pid
        while True:
            if self.agent.returncode is not None:
                if self.agent_died is None and not self.stopping:
                    self.agent_died = f"agent exited with status {self.agent.returncode} during the run"
                    self.say(self.agent_died)
                    self.stop_early.set()
                return
            try:
                status = proc_status(pid)
                fds = fd_count(pid)
                cpu = proc_cpu_seconds(pid)
            except (OSError, ValueError, IndexError):
                await asyncio.sleep(0.2)
                continue
            rss = status.get("VmRSS", 0)
            self.rss_max_kib = max(self.rss_max_kib, rss)
            self.fds_max = max(self.fds_max, fds)
            self.samples.append({"t": round(time.time() - (self.t0 or time.time()), 1),
                                 "rss_kib": rss, "hwm_kib": status.get("VmHWM", 0), "fds": fds,
                                 "cpu_s": round(cpu, 2), "replies": self.counts["replies"]})
            before = time.monotonic()
            await asyncio.sleep(1.0)
            lag = time.monotonic() - before - 1.0
            self.loop_lag_max = max(self.loop_lag_max, lag)
            self.loop_lag_sum += lag
            self.loop_lag_n += 1

    async def progress(self) -> None:
        assert self.t0 is not None
        boundary = 1
        last_replies = self.counts["replies"]
        last_stats = await self.agent_stats()
        while True:
            target = self.t0 + boundary * PHASE_SECONDS
            end = self.t0 + self.duration
            wait = min(target, end) - time.time()
            if wait > 0:
                try:
                    await asyncio.wait_for(self.stop_early.wait(), wait)
                    return
                except asyncio.TimeoutError:
                    pass
            now = time.time()
            span = now - (self.t0 + (boundary - 1) * PHASE_SECONDS)
            phase = PHASES[(boundary - 1) % len(PHASES)]
            replies = self.counts["replies"]
            stats = await self.agent_stats()
            delta = lambda key: int(stats.get(key, 0)) - int(last_stats.get(key, 0))  # noqa: E731
            errors = " ".join(f"{code}={n}" for code, n in sorted(self.errors.items())) or "none"
            sample = self.samples[-1] if self.samples else {}
            bad = sum(self.counts[k] for k in BAD_KEYS)
            self.say(f"{phase:<8} {int((replies - last_replies) / max(span, 0.001)):>6} replies/s; "
                     f"errors so far: {errors}; bad replies {bad}; "
                     f"agent: fetches +{delta('fetches')} errors +{delta('fetch_errors')} "
                     f"refreshes +{delta('refreshes')} entries={stats.get('entries', '?')} "
                     f"inflight={stats.get('inflight', '?')} "
                     f"rss={sample.get('rss_kib', 0) / 1024:.1f} MiB fds={sample.get('fds', '?')}")
            last_replies, last_stats = replies, stats
            if now >= end - 0.01:
                return
            boundary += 1

    # -- the run ----------------------------------------------------------------------------

    async def run(self) -> int:
        limits = raise_fd_limit()
        self.say(f"directory {self.dir}; RLIMIT_NOFILE {limits[0]}; agent {self.args.binary}")
        await self.start_provider()
        await self.start_agent()
        assert self.agent is not None
        pid = self.agent.pid
        self.say(f"agent pid {pid}: {' '.join(self.agent_args)}")
        await asyncio.sleep(1.0)
        self.snapshots["idle, before clients"] = fd_breakdown(pid)
        self.rss_at["idle"] = proc_status(pid).get("VmRSS", 0)
        sampler = asyncio.create_task(self.sampler())

        connected = asyncio.Semaphore(64)
        ready = [0]
        clients = [asyncio.create_task(self.client(n, connected, ready))
                   for n in range(self.args.connections)]
        deadline = time.monotonic() + 60
        while ready[0] < self.args.connections and time.monotonic() < deadline:
            if self.stop_early.is_set():
                break
            await asyncio.sleep(0.05)
        if ready[0] < self.args.connections:
            raise RuntimeError(f"only {ready[0]} of {self.args.connections} connections opened in 60 s")
        await self.agent_stats()  # opens the control connection, so every snapshot counts it
        await asyncio.sleep(0.5)
        self.snapshots["start, clients connected"] = fd_breakdown(pid)
        self.say(f"{ready[0]} connections open; agent fds {self.snapshots['start, clients connected']}")

        self.t0 = time.time()
        self.go.set()
        assert self.provider is not None and self.provider.stdin is not None
        self.provider.stdin.write(f"start {self.t0:.6f}\n".encode())
        await self.provider.stdin.drain()
        self.started_utc = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.say(f"load started: {self.args.connections} connections, {2 * IDS_PER_KIND} keys, "
                 f"{self.args.minutes:g} min; phases rotate every {PHASE_SECONDS:g} s")
        self.loadavg_start = [round(x, 2) for x in os.getloadavg()]
        cpu_start = (machine_busy_seconds(), proc_cpu_seconds(pid), own_cpu_seconds(),
                     proc_cpu_seconds(self.provider.pid))
        await self.progress()
        self.elapsed = time.time() - self.t0
        self.loadavg_end = [round(x, 2) for x in os.getloadavg()]
        try:
            cpu_end = (machine_busy_seconds(), proc_cpu_seconds(pid), own_cpu_seconds(),
                       proc_cpu_seconds(self.provider.pid))
            used = [round(end - begin, 1) for begin, end in zip(cpu_start, cpu_end)]
            self.cpu_during_load = {
                "machine_busy_s": used[0], "agent_s": used[1], "soak_clients_s": used[2],
                "fake_provider_s": used[3],
                "other_processes_s": round(used[0] - used[1] - used[2] - used[3], 1),
                "machine_capacity_s": round((os.cpu_count() or 1) * self.elapsed, 1)}
        except (OSError, ValueError, IndexError):
            self.cpu_during_load = {}
        self.stats_at["end of load"] = await self.agent_stats()

        # Stop asking; wait for every owed reply (bounded), then measure with clients still open.
        self.stopping = True
        replies_at_stop = self.counts["replies"]
        drain_deadline = time.monotonic() + 60
        while time.monotonic() < drain_deadline and not self.agent_died:
            if self.drained + sum(1 for c in clients if c.done()) >= len(clients):
                break
            await asyncio.sleep(0.1)
        self.counts["clients_not_drained_in_60s"] = len(clients) - self.drained - sum(
            1 for c in clients if c.done())
        self.counts["replies_after_stop"] = self.counts["replies"] - replies_at_stop
        if self.agent.returncode is None:
            self.snapshots["end, clients connected"] = fd_breakdown(pid)
            self.rss_at["end"] = proc_status(pid).get("VmRSS", 0)
        self.close_now.set()
        done, not_done = await asyncio.wait(clients, timeout=30)
        for task in not_done:
            task.cancel()
        self.counts["clients_unfinished_at_end"] = len(not_done)
        await self.close_control()
        await asyncio.sleep(self.args.settle)
        if self.agent.returncode is None:
            self.snapshots["end, clients closed + settle"] = fd_breakdown(pid)
            status = proc_status(pid)
            self.rss_at["after clients closed"] = status.get("VmRSS", 0)
            self.hwm_kib = status.get("VmHWM", 0)
            self.agent_cpu = proc_cpu_seconds(pid)
            self.stats_at["final"] = await self.agent_stats()
            await self.close_control()
        else:
            self.hwm_kib = max((s["hwm_kib"] for s in self.samples), default=0)
            self.agent_cpu = self.samples[-1]["cpu_s"] if self.samples else 0.0
        sampler.cancel()
        if self.agent.returncode is not None and self.agent_died is None:
            self.agent_died = f"agent exited with status {self.agent.returncode} during the run"
        await self.stop_agent()
        await self.stop_provider()
        return self.report()

    # -- report -----------------------------------------------------------------------------

    def rss_by_minute(self) -> dict[str, float]:
        """VmRSS at the first sample of each minute of the load (0 = when the load started)."""
        by_minute: dict[str, float] = {}
        for sample in self.samples:
            if sample["t"] >= 0:
                by_minute.setdefault(str(int(sample["t"] // 60)), round(sample["rss_kib"] / 1024, 1))
        return by_minute

    def percentile(self, fraction: float) -> str:
        total = sum(self.latency)
        if total == 0:
            return "n/a"
        running = 0
        for index, count in enumerate(self.latency):
            running += count
            if running >= fraction * total:
                return (f"<= {LATENCY_BOUNDS_MS[index]:g} ms" if index < len(LATENCY_BOUNDS_MS)
                        else f"> {LATENCY_BOUNDS_MS[-1]:g} ms")
        return "n/a"

    def report(self) -> int:
        c = self.counts
        provider_stats = {}
        try:
            with open(os.path.join(self.dir, "provider-stats.json")) as stats:
                provider_stats = json.load(stats)
        except (OSError, ValueError):
            pass
        log_path = os.path.join(self.dir, "agent.log")
        log_lines, log_levels = 0, collections.Counter()
        try:
            with open(log_path, "rb") as log:
                for line in log:
                    log_lines += 1
                    match = re.search(rb" (trace|debug|info|notice|warning|error|critical) ", line[:80])
                    log_levels[match.group(1).decode() if match else "other"] += 1
        except OSError:
            pass
        snaps = self.snapshots
        idle = snaps.get("idle, before clients", {})
        closed = snaps.get("end, clients closed + settle", {})
        start = snaps.get("start, clients connected", {})
        end = snaps.get("end, clients connected", {})
        unix_leak = (closed.get("unix", 0) - idle.get("unix", 0)) if closed and idle else None
        failures = []
        for key in BAD_KEYS:
            if c[key]:
                failures.append(f"{key}={c[key]}")
        if self.agent_died:
            failures.append(self.agent_died)
        if unix_leak is not None and unix_leak > 5:
            failures.append(f"fd leak: {unix_leak} more Unix sockets after every client closed")
        if not closed:
            failures.append("no end-of-run fd snapshot (agent gone)")
        if self.agent_exit not in (None, 0):
            failures.append(f"agent exited with status {self.agent_exit} after SIGTERM")
        elapsed = getattr(self, "elapsed", 0.0) or 0.0
        per_phase = {}
        phase_seconds = collections.Counter()
        for second in range(int(elapsed)):
            phase_seconds[phase_at(0.0, second + 0.5)[0]] += 1
        for phase, counts in sorted(self.by_phase.items()):
            seconds = phase_seconds.get(phase, 0)
            per_phase[phase] = {
                "seconds": seconds,
                "replies_per_s": round(counts["replies"] / seconds) if seconds else None,
                **{k: v for k, v in sorted(counts.items())},
            }
        report = {
            "verdict": "FAIL" if failures else "PASS",
            "failures": failures,
            "run": {
                "started_utc": getattr(self, "started_utc", None),
                "minutes": self.args.minutes,
                "load_seconds": round(elapsed, 1),
                "connections": self.args.connections,
                "keys": 2 * IDS_PER_KIND,
                "in_flight_per_connection": "1 to 4 (connection n keeps 1 + n % 4)",
                "request_mix": "GET vehicle|trip uniform over 5,000 ids each; 5% with min-validity "
                               "15/30/60; 1% PING",
                "agent": [self.args.binary] + self.agent_args,
                "provider_lifetime_s": [self.args.lifetime_min, self.args.lifetime_max],
                "phases": list(PHASES),
                "phase_seconds": PHASE_SECONDS,
                "cpus": os.cpu_count(),
                "loadavg_start": getattr(self, "loadavg_start", None),
                "loadavg_end": getattr(self, "loadavg_end", None),
                "client_cpu_s": round(own_cpu_seconds(), 1),
                "cpu_during_load": getattr(self, "cpu_during_load", {}),
                "agent_cpu_s": round(getattr(self, "agent_cpu", 0.0), 1),
                "directory": self.dir,
            },
            "replies": {
                "total": c["replies"],
                "per_second": round(c["replies"] / elapsed) if elapsed else None,
                "ok": c["ok"],
                "pong": c["pong"],
                "errors": sum(self.errors.values()),
                "after_stop": c["replies_after_stop"],
                "by_phase": per_phase,
            },
            "checks": {
                "wrong_id": c["wrong_id"],
                "under_floor_exp": c["under_floor_exp"],
                "under_floor_expires_at": c["under_floor_expires_at"],
                "expires_at_after_exp": c["expires_at_after_exp"],
                "malformed_replies": c["malformed_replies"],
                "order_problems": c["order_problems"],
                "lost_requests": c["lost_requests"],
                "under_floor_at_receipt": c["under_floor_at_receipt"],
                "expired_at_receipt": c["expired_at_receipt"],
                "least_left_at_receipt_s": None if self.min_left_at_receipt is None
                else round(self.min_left_at_receipt, 3),
                "client_loop_lag_max_s": round(self.loop_lag_max, 3),
                "client_loop_lag_mean_s": round(self.loop_lag_sum / self.loop_lag_n, 4)
                if self.loop_lag_n else None,
                "ok_below_requested_validity_info": c["ok_below_requested_validity_info"],
                "examples": self.samples_bad,
            },
            "errors_by_code": dict(sorted(self.errors.items())),
            "error_texts": dict(self.error_texts.most_common(25)),
            "connections": {
                "closed_by_agent": c["closed_by_agent"],
                "reconnects": c["reconnects"],
                "connect_errors": c["connect_errors"],
                "connection_errors": c["connection_errors"],
                "refused_busy": c["refused_busy_connections"],
                "clients_not_drained_in_60s": c["clients_not_drained_in_60s"],
                "clients_unfinished_at_end": c["clients_unfinished_at_end"],
            },
            "latency": {
                "p50": self.percentile(0.50), "p90": self.percentile(0.90),
                "p99": self.percentile(0.99), "p99.9": self.percentile(0.999),
                "max_ms": round(self.latency_max * 1000, 1),
                "histogram_upper_bounds_ms": list(LATENCY_BOUNDS_MS) + ["inf"],
                "histogram": self.latency,
            },
            "agent_memory": {
                "peak_rss_vmhwm_mib": round(getattr(self, "hwm_kib", 0) / 1024, 1),
                "max_sampled_vmrss_mib": round(self.rss_max_kib / 1024, 1),
                "vmrss_mib": {k: round(v / 1024, 1) for k, v in self.rss_at.items()},
                "vmrss_mib_at_minute": self.rss_by_minute(),
            },
            "agent_fds": {
                "snapshots": snaps,
                "max_sampled": self.fds_max,
                "unix_sockets_after_close_minus_idle": unix_leak,
                "clients_connected_end_minus_start": (end.get("total", 0) - start.get("total", 0))
                if start and end else None,
            },
            "agent_stats": self.stats_at,
            "agent_exit_after_sigterm": self.agent_exit,
            "agent_log": {"path": log_path, "lines": log_lines, "levels": dict(log_levels)},
            "provider": provider_stats,
            "provider_phase_changes": self.phase_log,
        }
        path = os.path.join(self.dir, "soak-report.json")
        with open(path, "w") as out:
            json.dump(report, out, indent=1)
        self.print_report(report, path)
        return 1 if failures else 0

    def print_report(self, r: dict, path: str) -> None:
        run, replies, checks = r["run"], r["replies"], r["checks"]
        memory, fds = r["agent_memory"], r["agent_fds"]
        lines = [
            "",
            "==================== fleet-tokend soak report ====================",
            f"verdict: {r['verdict']}" + (f" ({'; '.join(r['failures'])})" if r["failures"] else ""),
            f"load: {run['load_seconds']} s, {run['connections']} connections, {run['keys']} keys, "
            f"{run['cpus']} CPUs, load average {run['loadavg_start']} -> {run['loadavg_end']}",
            f"replies: {replies['total']} ({replies['per_second']}/s); ok {replies['ok']}, "
            f"pong {replies['pong']}, errors {replies['errors']}",
        ]
        for phase in PHASES + ("drain",):
            p = replies["by_phase"].get(phase)
            if p:
                errs = " ".join(f"{k[4:]}={v}" for k, v in p.items() if k.startswith("err:"))
                late = p.get("under_floor_at_receipt", 0)
                lines.append(f"  {phase:<8} {p['seconds']:>4} s  {p['replies_per_s'] or 0:>6}/s  "
                             f"ok {p.get('ok', 0)}  under 10 s when received {late}  "
                             f"errors {p.get('err', 0)} {errs}".rstrip())
        lines += [
            f"wrong id: {checks['wrong_id']}   picked with under 10 s (exp): {checks['under_floor_exp']}"
            f"   (expires-at): {checks['under_floor_expires_at']}   "
            f"expires-at after exp: {checks['expires_at_after_exp']}",
            f"under 10 s when received: {checks['under_floor_at_receipt']} "
            f"(of which expired: {checks['expired_at_receipt']}; least left "
            f"{checks['least_left_at_receipt_s']} s; client loop lag max "
            f"{checks['client_loop_lag_max_s']} s)",
            f"malformed: {checks['malformed_replies']}   out of order: {checks['order_problems']}   "
            f"lost to closes: {checks['lost_requests']}",
            "errors by code: " + (" ".join(f"{k}={v}" for k, v in r["errors_by_code"].items()) or "none"),
        ]
        for text, n in list(r["error_texts"].items())[:8]:
            lines.append(f"  {n:>9}  {text}")
        conns = r["connections"]
        lines += [
            f"connections: closed by agent {conns['closed_by_agent']}, reconnects {conns['reconnects']}, "
            f"connect errors {conns['connect_errors']}, other errors {conns['connection_errors']}",
            f"latency: p50 {r['latency']['p50']}, p90 {r['latency']['p90']}, p99 {r['latency']['p99']}, "
            f"p99.9 {r['latency']['p99.9']}, max {r['latency']['max_ms']} ms",
            f"agent RSS: peak (VmHWM) {memory['peak_rss_vmhwm_mib']} MiB, max sampled "
            f"{memory['max_sampled_vmrss_mib']} MiB, " +
            ", ".join(f"{k} {v}" for k, v in memory["vmrss_mib"].items()),
            "agent fds:",
        ]
        for name, snap in fds["snapshots"].items():
            lines.append(f"  {name:<30} {snap.get('total', 0):>5}  {snap}")
        lines += [
            f"  Unix sockets after close minus idle: {fds['unix_sockets_after_close_minus_idle']}; "
            f"with clients, end minus start: {fds['clients_connected_end_minus_start']}",
            f"CPU seconds during the load: {run['cpu_during_load']}",
            f"agent CPU {run['agent_cpu_s']} s, soak client CPU {run['client_cpu_s']} s; "
            f"agent exit after SIGTERM: {r['agent_exit_after_sigterm']}",
            f"agent STATS at the end: {' '.join(f'{k}={v}' for k, v in r['agent_stats'].get('final', {}).items())}",
            f"agent log: {r['agent_log']['lines']} lines {r['agent_log']['levels']}",
            f"provider: {r['provider']}",
            f"report: {path}",
            "===================================================================",
        ]
        print("\n".join(lines), flush=True)

    async def cleanup(self) -> None:
        for process in (self.agent, self.provider):
            if process is not None and process.returncode is None:
                try:
                    process.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(process.wait(), 10)
                except (ProcessLookupError, asyncio.TimeoutError):
                    try:
                        process.kill()
                        await process.wait()
                    except ProcessLookupError:
                        pass


async def soak_main(args: argparse.Namespace) -> int:
    soak = Soak(args)
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
    try:
        return await soak.run()
    except RuntimeError as error:
        print(f"soak: {error}", file=sys.stderr, flush=True)
        return 2
    finally:
        await asyncio.shield(soak.cleanup())
        try:
            os.unlink(soak.socket_path)
        except OSError:
            pass


def main(argv: list[str]) -> int:
    if argv and argv[0] == "provider":
        return provider_main(argv[1:])
    parser = argparse.ArgumentParser(prog="soak.py", description="Soak test of fleet-tokend.")
    parser.add_argument("minutes", nargs="?", type=float, default=10.0)
    parser.add_argument("--binary", required=True, help="the fleet-tokend executable")
    parser.add_argument("--dir", required=True, help="working directory for the socket, logs, report")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--lifetime-min", type=int, default=90)
    parser.add_argument("--lifetime-max", type=int, default=180)
    parser.add_argument("--max-concurrent-fetches", type=int, default=None,
                        help="passed to the agent; its default (16) when absent")
    parser.add_argument("--idle-timeout", type=int, default=None,
                        help="passed to the agent; its default (600 s) when absent")
    parser.add_argument("--agent-log-level", default="info")
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 24 * 60:
        parser.error("minutes must be more than 0 and at most 1440")
    args.binary = os.path.abspath(args.binary)
    try:
        return asyncio.run(soak_main(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("soak: interrupted; agent and provider stopped", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
