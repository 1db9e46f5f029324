#!/usr/bin/env bash
# Start to READY: how long `fleet-tokend serve` takes from exec to READY=1 on $NOTIFY_SOCKET and to
# its first PONG, with an empty cache, and what taking over a cache of 100,000 tokens from the fd
# store adds.
#   bash Benchmarks/startup.sh
#   RUNS=5 HANDOVER_TOKENS=0 bash Benchmarks/startup.sh          # quick look, no hand-over rows
# Environment (defaults in brackets):
#   RUNS [20]  starts per row     HANDOVER_TOKENS [100000]  tokens in the hand-over snapshot (0: skip)
#   AGENT_BINARY  the agent to measure (default: this tree's release build)
# Builds the agent (release, .build-bench-release) and load-gen (release, Benchmarks/.build), then
# runs Benchmarks/startup.py, which plays systemd's part: it listens on $NOTIFY_SOCKET, times each
# start, and for the hand-over rows keeps the cache file a stopping agent hands to the fd store and
# passes it to the next start (LISTEN_FDS=1, LISTEN_FDNAMES=cache); the hand-over rows mint and
# start with a service-account key made by openssl (a snapshot's tokens are only taken by an agent
# with the same provider). Method: docs/BENCHMARKS-METHOD.md ("start to READY, empty cache; hand-over").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

RUNS=${RUNS:-20}
HANDOVER_TOKENS=${HANDOVER_TOKENS:-100000}

echo "building (release)..." >&2
if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}

work=$(mktemp -d /tmp/ftd-startup.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 Benchmarks/startup.py --agent "$(realpath "$AGENT")" \
    --load-gen "$(realpath Benchmarks/.build/release/load-gen)" \
    --runs "$RUNS" --handover-tokens "$HANDOVER_TOKENS" --work "$work" "$@"
