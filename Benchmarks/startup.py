#!/usr/bin/env python3
"""Start to READY of fleet-tokend, run by Benchmarks/startup.sh (method in docs/BENCHMARKS-METHOD.md).

Plays the part of systemd for the agent: a datagram socket as $NOTIFY_SOCKET that receives READY=1
(and, at stop, the cache file handed to the fd store), and for the hand-over rows the cache file
passed back on the next start as descriptor 3 with LISTEN_FDS=1 and LISTEN_FDNAMES=cache, as
systemd passes its fd store to a restarted service. Each start is timed from just before the
spawn to the READY=1 datagram and to the first PONG on the agent's socket (a prober connects and
sends PING every half millisecond from before the spawn).
"""

import argparse
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


def log(text):
    print(text, file=sys.stderr, flush=True)


class Notify:
    """$NOTIFY_SOCKET: a datagram socket that collects what the agent sends.

    A thread reads it all the time, as systemd does: the kernel queues only a few datagrams
    (net.unix.max_dgram_qlen, 10 by default), and an agent whose notification finds the queue full
    blocks in it. Each datagram is stamped when read.
    """

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 16)
            self.queue.put((time.monotonic_ns(), data.decode(errors="replace"), fds))

    def receive(self, timeout):
        """One datagram as (when read, text, passed descriptors), or None after `timeout` seconds."""
        try:
            return self.queue.get(timeout=timeout) if timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            return None

    def drain(self, keep_cache=False):
        """Reads what is queued; returns the descriptor stored as FDNAME=cache if asked to keep it."""
        kept = None
        while True:
            message = self.receive(0.0 if kept is not None or not keep_cache else 0.5)
            if message is None:
                return kept
            _, text, fds = message
            lines = text.split("\n")
            if keep_cache and "FDSTORE=1" in lines and "FDNAME=cache" in lines and fds and kept is None:
                kept = fds[0]
                fds = fds[1:]
            for fd in fds:
                os.close(fd)


def agent_line(path, line, timeout=30):
    """Sends `line` to the agent's socket at `path` and returns its reply line (text), or what
    came before the agent closed the connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        client.connect(path)
        client.sendall(line.encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = client.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply.decode(errors="replace")


def agent_stats(path):
    """The agent's STATS fields, each value as text, by name."""
    return dict(field.split("=", 1) for field in agent_line(path, "STATS").split()[1:] if "=" in field)


def probe_pong(path, stop, result):
    """Connects to `path` and sends PING every 0.5 ms until a PONG comes back; records when."""
    while not stop.is_set():
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(path)
            client.sendall(b"PING\n")
            client.settimeout(10)
            reply = client.recv(16)
            if reply.startswith(b"PONG"):
                result.append(time.monotonic_ns())
                return
        except OSError:
            pass
        finally:
            client.close()
        time.sleep(0.0005)


# Agents started and not yet stopped, ended if the script fails.
live = []


def start(argv, env, notify, socket_path, pass_fds=(), timeout=120):
    """Starts the agent; returns (process, ms to READY=1, ms to first PONG)."""
    notify.drain()
    stop = threading.Event()
    pongs = []
    prober = threading.Thread(target=probe_pong, args=(socket_path, stop, pongs), daemon=True)
    prober.start()
    began = time.monotonic_ns()
    process = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(socket_path + ".log", "ab"),
        pass_fds=pass_fds,
    )
    live.append(process)
    ready_at = None
    deadline = time.monotonic() + timeout
    while ready_at is None:
        left = deadline - time.monotonic()
        if left <= 0 or process.poll() is not None:
            stop.set()
            raise SystemExit(f"no READY=1 from {argv[0]} (exit status {process.poll()}); see {socket_path}.log")
        message = notify.receive(min(left, 1.0))
        if message is None:
            continue
        read_at, text, fds = message
        for fd in fds:
            os.close(fd)
        if "READY=1" in text.split("\n"):
            ready_at = read_at
    prober.join(timeout)
    stop.set()
    if not pongs:
        raise SystemExit(f"no PONG on {socket_path}")
    return process, (ready_at - began) / 1e6, (pongs[0] - began) / 1e6


def stop_agent(process, notify, keep_cache=False):
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    live.remove(process)
    return notify.drain(keep_cache=keep_cache)


def issuer_key(work):
    """`--issuer-key` and a Google service-account JSON file with a new RSA-2048 key (openssl)."""
    pem_path = os.path.join(work, "issuer.pem")
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pem_path],
        check=True, capture_output=True,
    )
    with open(pem_path) as file:
        pem = file.read()
    account = {
        "type": "service_account", "project_id": "bench", "private_key_id": "bench",
        "private_key": pem, "client_email": "fleet-engine@bench.iam.gserviceaccount.com",
    }
    account_path = os.path.join(work, "issuer.json")
    with open(account_path, "w") as file:
        json.dump(account, file)
    return ["--issuer-key", account_path]


def run_killing_leftovers(run, options):
    """Runs `run(options)`; any agent it started and did not stop is killed after it."""
    try:
        run(options)
    finally:
        for process in live:
            process.kill()
            process.wait()


def agent_environment(work):
    """$NOTIFY_SOCKET in `work` (a Notify reading it) and the agent's environment: this one, with
    NOTIFY_SOCKET set and no inherited socket activation."""
    notify = Notify(os.path.join(work, "notify.sock"))
    env = dict(os.environ, NOTIFY_SOCKET=notify.path)
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "FLEET_TOKEND_SOCKET"):
        env.pop(name, None)
    return notify, env


def summary(values):
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--load-gen", required=True)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--handover-tokens", type=int, default=100000, help="0 skips the hand-over rows")
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument("--work", required=True, help="an empty directory for sockets and logs")
    options = parser.parse_args()
    run_killing_leftovers(run, options)


def run(options):
    work = options.work
    notify, env = agent_environment(work)
    counter = [0]

    def socket_path():
        counter[0] += 1
        return os.path.join(work, f"agent-{counter[0]}.sock")

    # An HTTP provider for vehicle that is never asked (nothing is fetched at start): the agent
    # without the demo issuer's RSA key generation, as configured in production.
    provider = ["--provider", "vehicle=http://127.0.0.1:9/token/{id}"]
    rows = {}

    def measure(name, extra, runs):
        ready, pong = [], []
        for _ in range(runs):
            path = socket_path()
            argv = [options.agent, "serve", "--socket", path, "--log-level", "warning"] + extra
            process, to_ready, to_pong = start(argv, env, notify, path)
            stop_agent(process, notify)
            ready.append(to_ready)
            pong.append(to_pong)
        rows[name] = {"ready_ms": ready, "pong_ms": pong}
        log(f"{name}: READY median {statistics.median(ready):.1f} ms, PONG median {statistics.median(pong):.1f} ms")

    log(f"start to READY, {options.runs} starts each...")
    measure("demo issuer, empty cache", ["--demo"], options.runs)
    measure("HTTP provider, empty cache", provider, options.runs)

    cache_fd = None
    if options.handover_tokens > 0:
        # A real snapshot: an agent minting with a service-account key (the local issuer) fetches
        # the tokens, and its stop hands the cache to "the fd store" (this script), as under
        # systemd. The next agent takes a kind's tokens only from the same provider (the snapshot
        # records a digest of each kind's), so every start below uses the same key file.
        count = options.handover_tokens
        issuer = issuer_key(work)
        path = socket_path()
        argv = [options.agent, "serve", "--socket", path, "--log-level", "warning", "--max-entries", str(count)]
        argv += issuer
        process, _, _ = start(argv, env, notify, path)
        log(f"minting {count} tokens with the local issuer for the hand-over snapshot...")
        warm = subprocess.run(
            [options.load_gen, "--unix", path, "--warm", "--keys", str(count), "--connections", "8", "--depth", "32",
             "--json"],
            check=True, capture_output=True, text=True,
        )
        result = json.loads(warm.stdout)
        if result["errors"] != 0 or result["requests"] != count:
            raise SystemExit(f"warming failed: {warm.stdout}")
        cache_fd = stop_agent(process, notify, keep_cache=True)
        if cache_fd is None:
            raise SystemExit("the agent handed no cache to the fd store at stop")
        size = os.fstat(cache_fd).st_size
        log(f"snapshot: {size} bytes in a sealed memfd")

        # Both rows start through the same /bin/sh, which sets LISTEN_PID to its own pid and execs
        # the agent (as systemd sets it for the service's main process); only the hand-over row
        # passes the snapshot as descriptor 3. Alternated, so both see the same machine.
        sh_plain = ["/bin/sh", "-c", 'exec "$0" "$@"']
        sh_passing = [
            "/bin/sh", "-c",
            f'export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=cache; exec "$0" "$@" 3<&{cache_fd}',
        ]
        kinds = {
            "issuer key, empty cache (via sh)": (sh_plain, ()),
            f"issuer key, {count}-token hand-over (via sh)": (sh_passing, (cache_fd,)),
        }
        figures = {name: ([], []) for name in kinds}
        for _ in range(options.runs):
            for name, (wrapper, fds) in kinds.items():
                path = socket_path()
                argv = wrapper + [options.agent, "serve", "--socket", path, "--log-level", "info",
                                  "--max-entries", str(count)] + issuer
                process, to_ready, to_pong = start(argv, env, notify, path, pass_fds=fds)
                stop_agent(process, notify)
                figures[name][0].append(to_ready)
                figures[name][1].append(to_pong)
                if fds:
                    # The agent logs what it took over: check it was all of it.
                    with open(path + ".log", errors="replace") as file:
                        text = file.read()
                    if f"tokens={count}" not in text.replace('"', "").replace(" ", ""):
                        taken = [line for line in text.splitlines() if "taken over" in line]
                        raise SystemExit(f"the agent did not take over {count} tokens: {taken}")
        for name, (ready, pong) in figures.items():
            rows[name] = {"ready_ms": ready, "pong_ms": pong}
            log(f"{name}: READY median {statistics.median(ready):.1f} ms")
        rows["snapshot_bytes"] = size
        os.close(cache_fd)

    print("| start | starts | READY median ms | READY max ms | first PONG median ms | first PONG max ms |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        if not isinstance(row, dict):
            continue
        ready, pong = summary(row["ready_ms"]), summary(row["pong_ms"])
        print(f"| {name} | {len(row['ready_ms'])} | {ready['median']:.1f} | {ready['max']:.1f} | "
              f"{pong['median']:.1f} | {pong['max']:.1f} |")
    if "snapshot_bytes" in rows:
        names = [name for name in rows if isinstance(rows[name], dict) and "(via sh)" in name]
        plain, passed = (statistics.median(rows[name]["ready_ms"]) for name in names)
        print(f"\nhand-over of {options.handover_tokens} tokens ({rows['snapshot_bytes']} bytes): "
              f"+{passed - plain:.1f} ms to READY (difference of the medians)")
    if options.json:
        with open(options.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
