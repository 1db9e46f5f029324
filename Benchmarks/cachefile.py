#!/usr/bin/env python3
"""The cache file's benchmark rows, run by Benchmarks/cache-file.sh (method in docs/BENCHMARKS-METHOD.md).

Three measurements against the release agent, each minting with a service-account key file (the
local issuer: a kind's tokens are adopted only from the same issuer, and the key makes the digest
the same across starts):

- Replacement: an agent holding N tokens is stopped (SIGTERM writes the file) and a new process
  starts on the same file, as a rollout replaces a pod. Timed from the spawn to READY=1 and to the
  first PONG, alternated with a start that has no cache file; then every one of the N keys is
  asked for (load-gen --warm) and STATS must show 0 fetches: every token came from the file.
- Crash: an agent writing every second gets NEW more keys, its next periodic write is waited for,
  LATE more keys come, and it is killed with SIGKILL. The next start adopts what the last write
  held, and asking for every key fetches exactly the LATE ones.
- The write's cost: the p99.9 of 64 x 1 socket GETs over the N adopted keys on an agent writing the
  file every second, against the same agent started to write only at stop; runs alternated.

Each agent is a plain process (no systemd): READY=1 is read from $NOTIFY_SOCKET, as startup.py does.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import time

from startup import (agent_environment, agent_stats, issuer_key, live, log, run_killing_leftovers, start,
                     stop_agent)


def stats(path):
    """The agent's STATS fields that are integers, by name."""
    return {name: int(value) for name, value in agent_stats(path).items() if value.lstrip("-").isdigit()}


def load_gen(options, path, *arguments):
    result = subprocess.run([options.load_gen, "--unix", path, "--json", *arguments],
                            check=True, capture_output=True, text=True)
    return json.loads(result.stdout)


def warm(options, path, first, count):
    """Asks once for keys first ..< first + count; fails unless every one was answered."""
    result = load_gen(options, path, "--warm", "--first-key", str(first), "--keys", str(count),
                      "--connections", "8", "--depth", "32")
    if result["errors"] != 0 or result["requests"] != count:
        raise SystemExit(f"warming {count} keys from {first} failed: {result}")


def adopted_line(log_path):
    with open(log_path, errors="replace") as file:
        lines = [line for line in file.read().splitlines() if "taken over" in line]
    return lines[-1] if lines else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--load-gen", required=True)
    parser.add_argument("--tokens", type=int, default=100000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--new", type=int, default=2000)
    parser.add_argument("--late", type=int, default=500)
    parser.add_argument("--work", required=True, help="an empty directory for sockets and logs")
    parser.add_argument("--state", required=True, help="an empty 0700 directory on tmpfs for the cache file")
    parser.add_argument("--json")
    parser.add_argument("--rows", default="replacement,crash,write-cost",
                        help="which rows to measure, comma-separated (the file is always made first)")
    parser.add_argument("--baseline-agent", action="append", default=[],
                        help="another agent binary whose write every second joins the write-cost runs, "
                             "alternated with this one's: a change's before and after in one sitting "
                             "(repeatable)")
    options = parser.parse_args()
    run_killing_leftovers(run, options)


def run(options):
    work, count = options.work, options.tokens
    notify, env = agent_environment(work)
    counter = [0]

    def socket_path():
        counter[0] += 1
        return os.path.join(work, f"agent-{counter[0]}.sock")

    cache = os.path.join(options.state, "tokens.cache")
    issuer = issuer_key(work)
    base = ["serve", "--log-level", "info", "--max-entries", str(count + options.new + options.late)] + issuer

    def argv(path, *extra):
        return [options.agent] + base[:1] + ["--socket", path] + base[1:] + list(extra)

    rows = {}
    # The file: an agent mints N tokens and writes them at its stop.
    path = socket_path()
    process, _, _ = start(argv(path, "--cache-file", cache, "--cache-file-interval", "0"), env, notify, path)
    log(f"minting {count} tokens...")
    warm(options, path, 0, count)
    stop_agent(process, notify)
    size = os.stat(cache).st_size
    log(f"cache file: {size} bytes")

    wanted = set(options.rows.split(","))
    rows["cache_bytes"] = size
    if "replacement" in wanted:
        replacement(options, rows, argv, env, notify, socket_path, cache, count)
    if "crash" in wanted:
        crash(options, rows, argv, env, notify, socket_path, cache, count)
    if "write-cost" in wanted:
        write_cost(options, rows, argv, env, notify, socket_path, cache, count)
    if options.json:
        with open(options.json, "w") as file:
            json.dump(rows, file, indent=1)


def replacement(options, rows, argv, env, notify, socket_path, cache, count):
    """A start on the file, alternated with a start without it."""
    size = rows["cache_bytes"]
    kinds = {
        "no cache file": (),
        f"{count}-token cache file": ("--cache-file", cache, "--cache-file-interval", "0"),
    }
    figures = {name: ([], []) for name in kinds}
    fetches_after = []
    for _ in range(options.runs):
        for name, extra in kinds.items():
            path = socket_path()
            process, to_ready, to_pong = start(argv(path, *extra), env, notify, path)
            if extra:
                line = adopted_line(path + ".log")
                if f"tokens={count}" not in line.replace('"', "").replace(" ", "") or "source=file" not in line:
                    raise SystemExit(f"the agent did not take over {count} tokens from the file: {line!r}")
                warm(options, path, 0, count)
                after = stats(path)
                if after.get("snapshot_adopted") != count:
                    raise SystemExit(f"snapshot_adopted={after.get('snapshot_adopted')}, not {count}")
                fetches_after.append(after["fetches"])
            stop_agent(process, notify)
            figures[name][0].append(to_ready)
            figures[name][1].append(to_pong)
    for name, (ready, pong) in figures.items():
        rows[name] = {"ready_ms": ready, "pong_ms": pong}
        log(f"{name}: READY median {statistics.median(ready):.1f} ms, PONG median {statistics.median(pong):.1f} ms")
    rows["fetches_after_replacement"] = fetches_after
    ready = {name: statistics.median(rows[name]["ready_ms"]) for name in kinds}
    pong = {name: statistics.median(rows[name]["pong_ms"]) for name in kinds}
    print("| start | starts | READY median ms | READY max ms | first PONG median ms |")
    print("|---|---|---|---|---|")
    for name in kinds:
        print(f"| {name} | {len(rows[name]['ready_ms'])} | {ready[name]:.1f} | {max(rows[name]['ready_ms']):.1f} | "
              f"{pong[name]:.1f} |")
    print(f"\nreplacement: {count} tokens ({size} bytes) adopted; fetches after asking for all of them: "
          f"{fetches_after}")


def crash(options, rows, argv, env, notify, socket_path, cache, count):
    """The periodic write, more keys, SIGKILL; the next start fetches only those."""
    path = socket_path()
    process, _, _ = start(argv(path, "--cache-file", cache, "--cache-file-interval", "1"), env, notify, path)
    warm(options, path, count, options.new)
    writes = stats(path)["snapshot_writes"]
    deadline = time.monotonic() + 60
    while stats(path)["snapshot_writes"] < writes + 2:  # one may have begun before the new keys
        if time.monotonic() > deadline:
            raise SystemExit("no periodic write within 60 s")
        time.sleep(0.05)
    warm(options, path, count + options.new, options.late)
    process.send_signal(signal.SIGKILL)
    process.wait()
    live.remove(process)
    path = socket_path()
    process, crash_ready, _ = start(argv(path, "--cache-file", cache, "--cache-file-interval", "0"), env, notify, path)
    adopted = stats(path)["snapshot_adopted"]
    warm(options, path, 0, count + options.new + options.late)
    fetched = stats(path)["fetches"]
    stop_agent(process, notify)
    rows["crash"] = {"adopted": adopted, "fetched": fetched, "ready_ms": crash_ready,
                     "new_before_write": options.new, "late": options.late}
    log(f"crash: adopted {adopted}, fetched {fetched} (late keys: {options.late})")
    print(f"crash: adopted {adopted}, fetched {fetched} of {count + options.new + options.late} asked "
          f"({options.late} came after the last periodic write)")


def write_cost(options, rows, argv, env, notify, socket_path, cache, count):
    """The p99.9 of 64 x 1 GETs, writing every second against only at stop; runs alternated."""
    loads = {"writing every 1 s": (options.agent, "1"), "writing only at stop": (options.agent, "0")}
    for baseline in options.baseline_agent:
        loads[f"writing every 1 s, {baseline}"] = (baseline, "1")
    runs = {name: [] for name in loads}
    for _ in range(options.rounds):
        for name, (agent, interval) in loads.items():
            path = socket_path()
            arguments = [agent] + argv(path, "--cache-file", cache, "--cache-file-interval", interval)[1:]
            process, _, _ = start(arguments, env, notify, path)
            # The write at start (the tokens just adopted) ends before the measurement begins.
            deadline = time.monotonic() + 120
            while stats(path)["snapshot_writes"] < 1:
                if time.monotonic() > deadline:
                    raise SystemExit("no write at start within 120 s")
                time.sleep(0.05)
            result = load_gen(options, path, "--connections", "64", "--depth", "1", "--keys", str(count),
                              "--duration", str(options.duration), "--warmup", str(options.warmup))
            after = stats(path)
            stop_agent(process, notify)
            runs[name].append({"p999_us": result["p999_us"], "p99_us": result["p99_us"],
                               "req_per_s": result["req_per_s"], "errors": result["errors"],
                               "writes": after["snapshot_writes"], "write_ms": after["snapshot_write_ms"]})
            log(f"{name}: p99.9 {result['p999_us']:.1f} us, {after['snapshot_writes']} writes, "
                f"last {after['snapshot_write_ms']} ms")
    rows["write_cost"] = runs
    medians = {name: statistics.median(run["p999_us"] for run in runs[name]) for name in loads}
    print("\n| load | runs | p99.9 µs (median run) | writes per run | last write ms |")
    print("|---|---|---|---|---|")
    for name in loads:
        writes = statistics.median(run["writes"] for run in runs[name])
        write_ms = statistics.median(run["write_ms"] for run in runs[name])
        print(f"| {name} | {len(runs[name])} | {medians[name]:.1f} | {writes:.0f} | {write_ms:.0f} |")
    print(f"\nwrite cost: p99.9 {medians['writing every 1 s'] / medians['writing only at stop']:.2f}x")
    for baseline in options.baseline_agent:
        ratio = medians[f"writing every 1 s, {baseline}"] / medians["writing only at stop"]
        print(f"write cost, {baseline}: p99.9 {ratio:.2f}x")


if __name__ == "__main__":
    main()
