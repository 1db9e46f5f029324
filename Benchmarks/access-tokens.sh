#!/usr/bin/env bash
# Access-token reads (issue 36): the token read through shared memory and through the agent's
# metadata endpoint, against each process fetching its own from a metadata server (fake-google's,
# answering in 2 to 5 ms), one process and 8 at once; the fake counts what reaches it.
#   bash Benchmarks/access-tokens.sh [--json PATH]
# Environment (defaults in brackets):
#   IAM_LATENCY_MS [50]  METADATA_LATENCY_MS [2-5]   fake-google's latencies
#   READS [200000]  HTTP_READS [5000]  BASELINE_READS [1000]   reads of the one-process rows
#   PROCESSES [8]  SECONDS_EACH [3]                 the processes' rows
#   AGENT_BINARY  the agent to measure (default: this tree's release build)
# Builds the agent and fake-google (release, .build-bench-release) and token-bench (release,
# Benchmarks/.build), then runs Benchmarks/access.py (about 30 s). Method:
# docs/BENCHMARKS-METHOD.md ("access token fetched from a metadata server; ...").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

echo "building (release)..." >&2
if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --product fake-google --scratch-path .build-bench-release >&2
swift build -c release --package-path Benchmarks --product token-bench >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}

python3 Benchmarks/access.py --agent "$(realpath "$AGENT")" \
    --fake "$(realpath .build-bench-release/release/fake-google)" \
    --token-bench "$(realpath Benchmarks/.build/release/token-bench)" \
    --iam-latency-ms "${IAM_LATENCY_MS:-50}" --metadata-latency-ms "${METADATA_LATENCY_MS:-2-5}" \
    --reads "${READS:-200000}" --http-reads "${HTTP_READS:-5000}" --baseline-reads "${BASELINE_READS:-1000}" \
    --processes "${PROCESSES:-8}" --seconds "${SECONDS_EACH:-3}" "$@"
