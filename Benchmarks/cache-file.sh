#!/usr/bin/env bash
# The cache file (cache_file): a replacement's start to READY with 100,000 tokens adopted and 0
# fetches after, a crash after a periodic write (only the keys since are fetched again), and the
# p99.9 of socket GETs while the file is written every second against an agent that writes it
# only at stop.
#   bash Benchmarks/cache-file.sh
# Environment (defaults in brackets):
#   TOKENS [100000]  RUNS [5] starts per replacement row  ROUNDS [3] runs per write-cost row
#   DURATION [10]  WARMUP [2]  seconds of each write-cost run
#   AGENT_BINARY  the agent to measure (default: this tree's release build)
# The file lives in a new 0700 directory under /dev/shm (tmpfs: the agent refuses a disk-backed
# directory unless cache_file_on_disk). Builds the agent (release, .build-bench-release) and
# load-gen (release, Benchmarks/.build), then runs Benchmarks/cachefile.py. Method:
# docs/BENCHMARKS-METHOD.md ("the cache file").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

echo "building (release)..." >&2
if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}

work=$(mktemp -d /tmp/ftd-cachefile.XXXXXX)
state=$(mktemp -d /dev/shm/ftd-cachefile.XXXXXX)
chmod 0700 "$state"
trap 'rm -rf "$work" "$state"' EXIT
python3 Benchmarks/cachefile.py --agent "$(realpath "$AGENT")" \
    --load-gen "$(realpath Benchmarks/.build/release/load-gen)" \
    --tokens "${TOKENS:-100000}" --runs "${RUNS:-5}" --rounds "${ROUNDS:-3}" \
    --duration "${DURATION:-10}" --warmup "${WARMUP:-2}" \
    --work "$work" --state "$state" "$@"
