#!/usr/bin/env bash
# The socket's floor: the release agent, a bare epoll server in Swift answering from a fixed table
# (epoll-floor, 2 loops: what a purpose-built loop could reach at best), and redis-server, under
# the same load-gen, runs alternated; each side's median run by throughput is printed.
#   bash Benchmarks/floor.sh
# Environment (defaults in brackets): ROUNDS [3]  DURATION [10]  WARMUP [2]  LOADS ["64x1 1x32"]
#   AGENT_BINARY (default: this tree's release build)  LOOPS [2] epoll-floor's threads
# Method: docs/BENCHMARKS-METHOD.md, "Where the socket's floor is".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh
source Benchmarks/ensure-redis.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
LOADS=${LOADS:-"64x1 1x32"}
LOOPS=${LOOPS:-2}

if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
swift build -c release --package-path Benchmarks --product epoll-floor >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}
LOADGEN=Benchmarks/.build/release/load-gen

work=$(mktemp -d /tmp/ftd-floor.XXXXXX)
pids=()
cleanup() {
    set +e
    for pid in "${pids[@]}"; do
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$AGENT" serve --demo --socket "$work/agent.sock" --log-level warning >"$work/agent.log" 2>&1 &
pids+=($!)
Benchmarks/.build/release/epoll-floor --unix "$work/floor.sock" --loops "$LOOPS" &
pids+=($!)
redis-server --port 0 --unixsocket "$work/redis.sock" --unixsocketperm 700 --save '' --appendonly no \
    >"$work/redis.log" 2>&1 &
pids+=($!)
for sock in agent floor redis; do
    for _ in $(seq 200); do [ -S "$work/$sock.sock" ] && break; sleep 0.05; done
done
"$LOADGEN" --unix "$work/agent.sock" --warm --keys 64 --connections 8 --depth 8 --json >/dev/null
"$LOADGEN" --unix "$work/redis.sock" --protocol redis --set-bytes 683 --keys 64 --json >/dev/null

field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
echo "| load | server | run | GET/s | p50 µs | p99 µs |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
    for load in $LOADS; do
        connections=${load%x*}
        depth=${load#*x}
        for server in agent floor redis; do
            protocol=agent
            [ "$server" = redis ] && protocol=redis
            out=$("$LOADGEN" --unix "$work/$server.sock" --protocol "$protocol" --connections "$connections" \
                --depth "$depth" --keys 64 --duration "$DURATION" --warmup "$WARMUP" --json)
            [ "$(field errors "$out")" = 0 ] || { echo "errors from $server: $out" >&2; exit 1; }
            echo "$load $server $(field req_per_s "$out") $(field p50_us "$out") $(field p99_us "$out")" >>"$work/runs.txt"
            echo "| $load | $server | $r | $(field req_per_s "$out") | $(field p50_us "$out") | $(field p99_us "$out") |"
        done
    done
done
echo
echo "Medians by throughput over $ROUNDS runs:"
echo
echo "| load | agent GET/s | epoll-floor GET/s | redis GET/s | agent / redis | floor / redis |"
echo "|---|---|---|---|---|---|"
for load in $LOADS; do
    median() { awk -v l="$load" -v s="$1" '$1 == l && $2 == s { print $3 }' "$work/runs.txt" | sort -g \
        | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    a=$(median agent); f=$(median floor); r=$(median redis)
    echo "| $load | $a | $f | $r | $(awk -v a="$a" -v r="$r" 'BEGIN { printf "%.2fx", a / r }') | $(awk -v a="$f" -v r="$r" 'BEGIN { printf "%.2fx", a / r }') |"
done
