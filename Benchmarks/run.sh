#!/usr/bin/env bash
# Builds the agent and token-bench in release mode and runs token-bench's rows side by side.
#   bash Benchmarks/run.sh [--iterations N] [--concurrency N] [--only <text>]... [--json <path>]
# Installs redis-server when missing (root) so the raw-socket comparison has its baseline. The
# agent is built where the other scripts build it (.build-bench-release). The headline figures of
# docs/BENCHMARKS.md come from `bash Benchmarks/report.sh`, which runs token-bench among others.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh
if ! command -v redis-server >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || true
fi
swift build -c release --product fleet-tokend --scratch-path .build-bench-release
swift build -c release --package-path Benchmarks
exec Benchmarks/.build/release/token-bench --agent .build-bench-release/release/fleet-tokend "$@"
