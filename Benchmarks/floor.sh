#!/usr/bin/env bash
# The socket's floor: the release agent, epoll-floor (a bare epoll server in Swift answering from a
# fixed table: what a purpose-built loop could reach at best) and redis-server under the same
# load-gen, runs alternated (agent, floor, Redis), each side's median run by throughput printed with
# agent/Redis and agent/floor. It is compare.sh with these defaults; report.sh runs the same with
# one loop beside its socket rows.
#   bash Benchmarks/floor.sh
# Environment (defaults in brackets): ROUNDS [3]  DURATION [10]  WARMUP [2]  LOADS ["64x1 1x32"]
#   LOOPS [1] epoll-floor's threads  AGENT_BINARY (default: this tree's release build)  JSON_OUT
# Method: docs/BENCHMARKS-METHOD.md, "Where the socket's floor is".
set -euo pipefail
cd "$(dirname "$0")/.."
LOADS=${LOADS:-"64x1 1x32"}
KEYSETS=64 LOADS="$LOADS" REPEATS="${ROUNDS:-3}" FLOOR_LOOPS="${LOOPS:-1}" FLOOR_LOADS="$LOADS" CLIENT_ROWS=0 \
    exec bash Benchmarks/compare.sh
