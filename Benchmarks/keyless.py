#!/usr/bin/env python3
"""Key-less signing through fakes of Google: how fast the agent fills a cold cache when every token
is a signJwt round trip at a stated IAM latency, and whether the per-issuer signature budget
(`signs_per_minute`) holds, counted at the fake IAM (not by the agent).

For each budget: start `fake-google --iam-latency-ms L --log-calls yes`, start the agent with one
key-less kind (`vehicle`, signed through the fake with its metadata server), then CONNECTIONS
clients ask for IDS distinct ids (one request in flight each, every id once), and the fake's log
gives every signature's arrival time.

Prints one JSON object per budget: fills per second, replies by code, signatures, and the largest
number of signatures in any window of W seconds against the bucket's bound (burst + rate x W),
for W = 1, 10 and 60 s.
"""
import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

from fakegoogle import start_agent, start_fake
from startup import agent_stats


def parse():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--fake", required=True)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--ids", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--budgets", default="60000,1200", help="signs_per_minute values, one run each")
    return parser.parse_args()


async def client(path, ids, replies):
    reader, writer = await asyncio.open_unix_connection(path)
    for id in ids:
        writer.write(f"GET vehicle {id}\n".encode())
        await writer.drain()
        line = (await reader.readline()).decode()
        code = line.split(" ", 2)[1] if line.startswith("ERR ") else "OK" if line.startswith("OK ") else "other"
        replies[code] = replies.get(code, 0) + 1
    writer.close()


def windows(times, width):
    """The most signatures in any window of `width` seconds."""
    best, start = 0, 0
    for end in range(len(times)):
        while times[end] - times[start] >= width:
            start += 1
        best = max(best, end - start + 1)
    return best


def run(args, budget):
    fake, info, call_lines, call_reader = start_fake(args.fake, "--iam-latency-ms", str(args.latency_ms))
    directory = tempfile.mkdtemp(prefix="keyless-bench-")
    socket_path = os.path.join(directory, "tokens.sock")
    config = {
        "issuers": {"vehicle": {"service_account": info["account"].split()[0], "signs_per_minute": budget}},
        "iam_endpoint": info["iam-endpoint"],
        "max_queued_fetches_per_uid": 100000,
    }
    config_path = os.path.join(directory, "config.json")
    with open(config_path, "w") as file:
        json.dump(config, file)
    environment = dict(os.environ, GOOGLE_APPLICATION_CREDENTIALS="", CREDENTIALS_DIRECTORY="",
                       CLOUDSDK_CONFIG=os.path.join(directory, "no-gcloud"), GCE_METADATA_HOST=info["metadata-host"])
    agent = start_agent(args.agent, socket_path, config_path, environment)
    ids = [f"k-{budget}-{index}" for index in range(args.ids)]
    replies = {}
    began = time.monotonic()

    async def load():
        await asyncio.gather(*(client(socket_path, ids[i :: args.connections], replies) for i in range(args.connections)))

    asyncio.run(load())
    elapsed = time.monotonic() - began
    stats = agent_stats(socket_path)
    time.sleep(0.3)  # the fake logs its calls every 100 ms
    agent.terminate()
    agent.wait()
    fake.terminate()
    fake.wait()
    call_reader.join(timeout=5)
    shutil.rmtree(directory, ignore_errors=True)
    calls = [line.split() for line in call_lines if line.startswith("signJwt ")]
    signed = sorted(int(call[1]) / 1000 for call in calls if call[2] == "200")
    rate = budget / 60
    result = {
        "budget_per_minute": budget,
        "iam_latency_ms": args.latency_ms,
        "ids": args.ids,
        "connections": args.connections,
        "seconds": round(elapsed, 2),
        "fills_per_second": round(replies.get("OK", 0) / elapsed, 1),
        "replies": replies,
        "signatures": len(signed),
        "signjwt_calls": len(calls),
        "agent_stats": {key: value for key, value in stats.items() if "sign" in key or key in ("fetches",)},
    }
    for width in (1, 10, 60):
        result[f"most_in_{width}s"] = windows(signed, width)
        result[f"rate_x_{width}s"] = round(rate * width, 1)
    print(json.dumps(result), flush=True)


def main():
    args = parse()
    for budget in [int(value) for value in args.budgets.split(",")]:
        run(args, budget)


if __name__ == "__main__":
    sys.exit(main())
