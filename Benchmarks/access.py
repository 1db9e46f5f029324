#!/usr/bin/env python3
"""Access-token reads (issue 36), run by Benchmarks/access-tokens.sh (method in
docs/BENCHMARKS-METHOD.md, "access token fetched from a metadata server; ...").

Starts `fake-google --iam-latency-ms L --metadata-latency-ms MIN-MAX --log-calls yes` and the
release agent with one `access_tokens` entry, `bench` (the fake's signing account, impersonated
through the fake's IAM Credentials, authorized by the host token from the fake's metadata server)
and `metadata_server` on a free loopback port, allowed to this uid. Then, in one sitting:

1. one process (`token-bench access`) reads the token, each read timed: from the entry's
   shared-memory segment (FleetTokenClient.accessToken), from the agent's metadata endpoint on one
   kept-alive connection and on a new connection each, and, the baseline, from the fake's metadata
   server (its latency per answer), as a worker fetching its own would;
2. PROCESSES processes at once, SECONDS each, every one reading the token the same way: fetching
   their own from the fake's metadata server, through shared memory, through the endpoint;
   the fake's log counts its generateAccessToken and metadata calls in each window.

Prints the figures as markdown; --json also writes them as one JSON object.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from fakegoogle import start_fake
from startup import agent_line, agent_stats


def parse():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--fake", required=True)
    parser.add_argument("--token-bench", required=True)
    parser.add_argument("--iam-latency-ms", type=int, default=50)
    parser.add_argument("--metadata-latency-ms", default="2-5")
    parser.add_argument("--reads", type=int, default=200000, help="shared-memory reads, one process")
    parser.add_argument("--http-reads", type=int, default=5000, help="reads from the endpoint, each way")
    parser.add_argument("--baseline-reads", type=int, default=1000, help="fetches from the fake's metadata server")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--json", help="also write the figures here")
    return parser.parse_args()


def log(text):
    print(text, file=sys.stderr, flush=True)


def now_ms():
    return int(time.time() * 1000)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def token_bench(options, common, *arguments):
    result = subprocess.run([options.token_bench, "access", *common, *arguments],
                            check=True, capture_output=True, text=True)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def count(calls, name, began, ended):
    return sum(1 for call in calls if call[0] == name and began <= int(call[1]) <= ended)


def main():
    options = parse()
    work = tempfile.mkdtemp(prefix="ftd-access-")
    fake, info, call_lines, reader = start_fake(
        options.fake, "--iam-latency-ms", str(options.iam_latency_ms),
        "--metadata-latency-ms", options.metadata_latency_ms,
    )
    agent = None
    try:
        socket_path = os.path.join(work, "tokens.sock")
        endpoint = f"127.0.0.1:{free_port()}"
        config = {
            "access_tokens": {"bench": {"service_account": info["account"].split()[0],
                                        "allow": {"users": [os.getuid()]}}},
            "iam_endpoint": info["iam-endpoint"],
            "metadata_server": {"listen": endpoint, "default": "bench"},
        }
        config_path = os.path.join(work, "config.json")
        with open(config_path, "w") as file:
            json.dump(config, file)
        environment = dict(os.environ, GOOGLE_APPLICATION_CREDENTIALS="", CREDENTIALS_DIRECTORY="",
                           CLOUDSDK_CONFIG=os.path.join(work, "no-gcloud"), GCE_METADATA_HOST=info["metadata-host"])
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "FLEET_TOKEND_SOCKET"):
            environment.pop(name, None)
        started_at = now_ms()
        began = time.monotonic()
        agent = subprocess.Popen([options.agent, "serve", "--socket", socket_path, "--config", config_path,
                                  "--log-level", "warning"], env=environment, stdin=subprocess.DEVNULL,
                                 stderr=open(os.path.join(work, "agent.log"), "wb"))
        reply = ""
        while not reply.startswith("OK "):
            if time.monotonic() - began > 30 or agent.poll() is not None:
                raise SystemExit(f"no access token from the agent ({reply.strip()!r}); see {work}/agent.log")
            try:
                reply = agent_line(socket_path, "GET access bench")
            except OSError:
                time.sleep(0.02)
        first_token_ms = (time.monotonic() - began) * 1000
        log(f"agent serving its access token {first_token_ms:.0f} ms after its start")
        common = ["--socket", socket_path, "--entry", "bench", "--endpoint", endpoint,
                  "--baseline", info["metadata-host"]]

        log(f"one process: {options.reads} shared-memory reads, {options.http_reads} from the endpoint each way, "
            f"{options.baseline_reads} fetches from the fake's metadata server")
        single_began = now_ms()
        single = {row["path"]: row for row in token_bench(
            options, common, "--reads", str(options.reads), "--http-reads", str(options.http_reads),
            "--baseline-reads", str(options.baseline_reads))}
        single_ended = now_ms()

        multi = {}
        for path in ("baseline", "shm", "endpoint"):
            log(f"{options.processes} processes, {path}, {options.seconds:g} s")
            window_began = now_ms()
            processes = [
                subprocess.Popen([options.token_bench, "access", *common, "--paths", path,
                                  "--seconds", str(options.seconds)], stdout=subprocess.PIPE, text=True)
                for _ in range(options.processes)
            ]
            rows = []
            for process in processes:
                out, _ = process.communicate(timeout=120)
                if process.returncode != 0:
                    raise SystemExit(f"token-bench access --paths {path} failed ({process.returncode})")
                rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            window_ended = now_ms()
            multi[path] = {
                "processes": len(rows),
                "reads": sum(row["reads"] for row in rows),
                "reads_per_s": sum(row["reads_per_s"] for row in rows),
                "p50_us": statistics.median(row["p50_us"] for row in rows),
                "p99_us": statistics.median(row["p99_us"] for row in rows),
                "first_us": statistics.median(row["first_us"] for row in rows),
                "window": [window_began, window_ended],
            }
        stats = agent_stats(socket_path)
        time.sleep(0.3)  # the fake logs its calls every 100 ms
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        fake.terminate()
        fake.wait()
        reader.join(timeout=5)
    calls = [line.split() for line in call_lines]
    for path, row in multi.items():
        row["generate_access_token"] = count(calls, "generateAccessToken", *row["window"])
        row["metadata_requests"] = count(calls, "metadata", *row["window"])
    access_stats = {name: value for name, value in stats.items()
                    if "access" in f"{name}={value}" or name == "fetches"}
    result = {
        "iam_latency_ms": options.iam_latency_ms,
        "metadata_latency_ms": options.metadata_latency_ms,
        "first_token_ms": round(first_token_ms, 1),
        "single": single,
        "multi": multi,
        "fake": {
            "generate_access_token": count(calls, "generateAccessToken", 0, 1 << 62),
            "generate_access_token_200": sum(1 for call in calls if call[0] == "generateAccessToken" and call[2] == "200"),
            "metadata_before_reads": count(calls, "metadata", started_at, single_began - 1),
            "metadata_single": count(calls, "metadata", single_began, single_ended),
        },
        "agent_stats": access_stats,
    }
    report(result, options)
    if options.json:
        with open(options.json, "w") as file:
            json.dump(result, file, indent=1)
    shutil.rmtree(work)  # kept, with the agent's log, when the run fails


def report(result, options):
    print(f"fake-google: IAM {result['iam_latency_ms']} ms, metadata server {result['metadata_latency_ms']} ms; "
          f"the agent served its token {result['first_token_ms']:.0f} ms after its start\n")
    print("| one process | reads | p50 µs | p99 µs | p99.9 µs | reads/s | first read µs | connections |")
    print("|---|---|---|---|---|---|---|---|")
    for path, row in result["single"].items():
        print(f"| {path} | {row['reads']} | {row['p50_us']:.2f} | {row['p99_us']:.2f} | {row['p999_us']:.2f} "
              f"| {row['reads_per_s']:.0f} | {row['first_us']:.0f} | {row.get('connections', '–')} |")
    print(f"\n| {options.processes} processes, {options.seconds:g} s | reads | reads/s (sum) | p50 µs (median) "
          "| p99 µs (median) | first read µs (median) | generateAccessToken at the fake | metadata requests at the fake |")
    print("|---|---|---|---|---|---|---|---|")
    for path, row in result["multi"].items():
        print(f"| {path} | {row['reads']} | {row['reads_per_s']:.0f} | {row['p50_us']:.2f} | {row['p99_us']:.2f} "
              f"| {row['first_us']:.0f} | {row['generate_access_token']} | {row['metadata_requests']} |")
    fake = result["fake"]
    print(f"\nAt the fake over the whole run: {fake['generate_access_token']} generateAccessToken "
          f"({fake['generate_access_token_200']} answered 200); metadata requests before the reads "
          f"(the agent's host token): {fake['metadata_before_reads']}; agent STATS: {result['agent_stats']}")


if __name__ == "__main__":
    sys.exit(main())
