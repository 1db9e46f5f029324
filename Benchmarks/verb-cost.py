#!/usr/bin/env python3
"""The agent's CPU time per reply of one verb, pipelined: `STATS`, `METRICS`, a cached GET.

Starts the agent given with a local provider (scripts/hostile-soak.py's), caches 1,000 keys, then
for --seconds one connection sends the verb --batch times and reads every reply, again and again.
Prints the replies a second and the agent's CPU time (user + system, /proc/PID/stat) divided by
the replies. Compare builds in one sitting:

    python3 Benchmarks/verb-cost.py --binary OLD --verb STATS
    python3 Benchmarks/verb-cost.py --binary NEW --verb STATS

Since builds pace each uid's `STATS`, `METRICS` and `INFO` (2,000 work units a second), those
verbs' rows measure the pace, not the reply, on such a build: the figures for them come from builds
before it (docs/BENCHMARKS-METHOD.md). Cached GETs are not paced.

Method and figures: docs/BENCHMARKS-METHOD.md ("STATS and METRICS").
"""

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
sys.path.insert(0, SCRIPTS)
spec = importlib.util.spec_from_file_location("hostile_soak", os.path.join(SCRIPTS, "hostile-soak.py"))
hostile_soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hostile_soak)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--verb", default="STATS", help='e.g. STATS, METRICS, "GET vehicle n-1"')
    parser.add_argument("--batch", type=int, default=0, help="requests a batch (default: 64 for METRICS, else 4,096)")
    parser.add_argument("--seconds", type=float, default=8)
    args = parser.parse_args()
    batch = args.batch or (64 if args.verb == "METRICS" else 4096)
    end_of_reply = b"# EOF\n" if args.verb == "METRICS" else b"\n"

    directory = tempfile.mkdtemp(prefix="ftd-verb-cost-")
    path = os.path.join(directory, "agent.sock")
    port = hostile_soak.serve(hostile_soak.FastProvider)
    config = os.path.join(directory, "config.json")
    with open(config, "w") as file:
        json.dump({"providers": {"vehicle": {"url": f"http://127.0.0.1:{port}/{{id}}", "timeout": 10}}}, file)
    log = open(os.path.join(directory, "agent.log"), "wb")
    agent = subprocess.Popen([args.binary, "serve", "--socket", path, "--config", config], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            if time.monotonic() > deadline or agent.poll() is not None:
                raise SystemExit("the agent did not start: see " + log.name)
            time.sleep(0.05)
        time.sleep(0.3)
        hostile_soak.warm(path, 1000)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        request = (args.verb + "\n").encode() * batch
        started_cpu, started = cpu_seconds(agent.pid), time.monotonic()
        replies, pending = 0, b""
        while time.monotonic() < started + args.seconds:
            sock.sendall(request)
            owed = batch
            while owed > 0:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise SystemExit("the agent closed the connection")
                pending += chunk
                ended = pending.count(end_of_reply)
                owed -= ended
                if ended:
                    pending = pending[pending.rfind(end_of_reply) + len(end_of_reply) :]
            replies += batch
        elapsed, cpu = time.monotonic() - started, cpu_seconds(agent.pid) - started_cpu
        print(json.dumps({
            "verb": args.verb,
            "replies_per_second": round(replies / elapsed),
            "agent_cpu_us_per_reply": round(cpu / replies * 1e6, 2),
        }))
        return 0
    finally:
        agent.terminate()
        agent.wait(timeout=20)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
