#!/usr/bin/env bash
# Builds the agent and the benchmark in release mode and runs every benchmark side by side.
#   bash Benchmarks/run.sh [--iterations N] [--concurrency N]
# Installs redis-server when missing (root) so the raw-socket comparison has its baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh
if ! command -v redis-server >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || true
fi
swift build -c release --product fleet-tokend
swift build -c release --package-path Benchmarks
exec Benchmarks/.build/release/token-bench --agent .build/release/fleet-tokend "$@"
