#!/usr/bin/env python3
"""Key-less fills through Workload Identity Federation: how many STS exchanges and impersonations
the host makes for a cold cache of several key-less kinds, counted at the fake (not by the agent).

Starts `fake-google --iam-latency-ms L --write-external-account DIR --log-calls yes` and the agent
with KINDS key-less kinds (`vehicle`, `trip` and `fed-2` ... with the vehicle claim), all signed
as the fake's account (`signs_per_minute` 60,000 each, as keyless.py's unbudgeted run), and the host's own access token; its credentials are the fake's
`file-text.json` (a subject token file exchanged at the fake's STS, then `generateAccessToken`).
CONNECTIONS clients ask for IDS distinct ids spread over the kinds, each id once, and then one
`GET access host`. The fake's call log counts STS exchanges, impersonations and signatures.

Prints one JSON object: fills per second, replies by code, and the calls at the fake. The host's
tokens live an hour, so the counts are the calls per hour per host whatever the number of kinds.
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


def parse():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--fake", required=True)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--ids", type=int, default=2000)
    parser.add_argument("--kinds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--budget", type=int, default=60000, help="signs_per_minute of each kind")
    return parser.parse_args()


async def client(path, requests, replies):
    reader, writer = await asyncio.open_unix_connection(path)
    for request in requests:
        writer.write(request.encode())
        await writer.drain()
        line = (await reader.readline()).decode()
        code = line.split(" ", 2)[1] if line.startswith("ERR ") else "OK" if line.startswith("OK ") else "other"
        replies[code] = replies.get(code, 0) + 1
    writer.close()


def main():
    args = parse()
    directory = tempfile.mkdtemp(prefix="federation-bench-")
    files = os.path.join(directory, "files")
    os.mkdir(files)
    fake, info, call_lines, call_reader = start_fake(
        args.fake, "--iam-latency-ms", str(args.latency_ms), "--write-external-account", files
    )
    try:
        account = info["account"].split()[0]
        kinds = ["vehicle", "trip"] + [f"fed-{index}" for index in range(2, args.kinds)]
        issuers = {kind: {"service_account": account, "signs_per_minute": args.budget} for kind in kinds[: args.kinds]}
        for kind in kinds[2 : args.kinds]:
            issuers[kind]["claim"] = "vehicleid"
        config = {
            "issuers": issuers,
            "access_tokens": {"host": {"source": "host", "allow": {"users": [os.getuid()]}}},
            "allow_host_identity": True,
            "iam_endpoint": info["iam-endpoint"],
            "max_queued_fetches_per_uid": 100000,
        }
        config_path = os.path.join(directory, "config.json")
        with open(config_path, "w") as file:
            json.dump(config, file)
        socket_path = os.path.join(directory, "tokens.sock")
        environment = dict(
            os.environ, GOOGLE_APPLICATION_CREDENTIALS=os.path.join(files, "file-text.json"),
            CREDENTIALS_DIRECTORY="", CLOUDSDK_CONFIG=os.path.join(directory, "no-gcloud"),
        )
        agent = start_agent(args.agent, socket_path, config_path, environment)
        requests = [f"GET {kinds[index % args.kinds]} f-{index}\n" for index in range(args.ids)]
        replies = {}
        began = time.monotonic()

        async def load():
            await asyncio.gather(*(client(socket_path, requests[i :: args.connections], replies)
                                   for i in range(args.connections)))
            await client(socket_path, ["GET access host\n"], replies)

        asyncio.run(load())
        elapsed = time.monotonic() - began
        time.sleep(0.3)  # the fake logs its calls every 100 ms
        agent.terminate()
        agent.wait()
    finally:
        fake.terminate()
        fake.wait()
        call_reader.join(timeout=5)
        shutil.rmtree(directory, ignore_errors=True)
    calls = [line.split() for line in call_lines]
    ok = lambda name: sum(1 for call in calls if call and call[0] == name and call[2] == "200")
    print(json.dumps({
        "kinds": args.kinds,
        "ids": args.ids,
        "connections": args.connections,
        "iam_latency_ms": args.latency_ms,
        "seconds": round(elapsed, 2),
        "fills_per_second": round((replies.get("OK", 0) - 1) / elapsed, 1),
        "replies": replies,
        "sts_exchanges": ok("sts"),
        "impersonations": ok("generateAccessToken"),
        "signatures": ok("signJwt"),
    }), flush=True)


if __name__ == "__main__":
    sys.exit(main())
