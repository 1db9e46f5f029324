#!/usr/bin/env bash
# What one cached socket GET costs the agent outside its own code: CPU time (user + system, from
# /proc) and system calls (strace -c), per GET, under a fixed number of GETs from load-gen.
#   bash Benchmarks/per-get.sh
#   AGENT_BINARY=/path/to/fleet-tokend bash Benchmarks/per-get.sh     # measure another build
# Environment (defaults in brackets):
#   LOADS ["64x1 1x32"]  connections x requests in flight on each
#   REQUESTS [400000]    GETs per CPU window; the strace window sends a quarter as many (strace
#                        slows the agent, not what it calls)
#   KEYS [64]            keys bench-0 ... bench-<KEYS-1>
#   AGENT_BINARY         the agent to measure (default: this tree's release build)
# Builds the agent (release, .build-bench-release) and load-gen, installs strace when missing
# (root), starts `fleet-tokend serve` on its demo issuer, warms the keys, then per load: reads the
# agent's utime + stime (/proc/PID/stat) around REQUESTS GETs, and attaches `strace -c -f` around
# another REQUESTS / 4. Prints one markdown table. Method: docs/BENCHMARKS-METHOD.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

LOADS=${LOADS:-"64x1 1x32"}
REQUESTS=${REQUESTS:-400000}
KEYS=${KEYS:-64}

if ! command -v strace >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "strace is missing: apt-get install -y strace, or run as root" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi

if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}
LOADGEN=Benchmarks/.build/release/load-gen

work=$(mktemp -d /tmp/ftd-per-get.XXXXXX)
agent_pid=""
cleanup() {
    set +e
    if [ -n "$agent_pid" ]; then
        kill "$agent_pid" 2>/dev/null
        wait "$agent_pid" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$AGENT" serve --demo --socket "$work/agent.sock" --log-level warning >"$work/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 200); do
    [ -S "$work/agent.sock" ] && [ "$(printf 'PING\n' | socat -t2 - "UNIX-CONNECT:$work/agent.sock" 2>/dev/null)" = PONG ] && break
    sleep 0.05
done
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
warm=$("$LOADGEN" --unix "$work/agent.sock" --warm --keys "$KEYS" --depth 8 --json)
[ "$(field errors "$warm")" = 0 ] || { echo "warming failed: $warm" >&2; exit 1; }

ticks=$(getconf CLK_TCK)
# utime + stime of every thread, in clock ticks (fields 14 and 15 after the command's parentheses).
cpu_ticks() { sed 's/.*) //' "/proc/$agent_pid/stat" | awk '{print $12 + $13}'; }
run() { # connections depth requests
    local out
    out=$("$LOADGEN" --unix "$work/agent.sock" --requests "$3" --connections "$1" --depth "$2" --keys "$KEYS" --json)
    [ "$(field errors "$out")" = 0 ] && [ "$(field requests "$out")" = "$3" ] || { echo "GETs failed: $out" >&2; exit 1; }
}

echo "| load | GETs | agent CPU µs per GET | syscalls per GET | read | write | epoll_wait | other |"
echo "|---|---|---|---|---|---|---|---|"
for load in $LOADS; do
    connections=${load%x*}
    depth=${load#*x}
    before=$(cpu_ticks)
    run "$connections" "$depth" "$REQUESTS"
    after=$(cpu_ticks)
    cpu=$(awk -v t=$((after - before)) -v hz="$ticks" -v n="$REQUESTS" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}')
    traced=$((REQUESTS / 4))
    strace -c -f -p "$agent_pid" -o "$work/strace.txt" 2>/dev/null &
    strace_pid=$!
    sleep 1  # attached to every thread before the window opens
    run "$connections" "$depth" "$traced"
    kill -INT "$strace_pid"
    wait "$strace_pid" 2>/dev/null || true
    # strace -c rows: % time, seconds, usecs/call, calls, [errors], syscall.
    awk -v n="$traced" -v load="$load" -v cpu="$cpu" -v gets="$REQUESTS" '
        $1 ~ /^[0-9.]+$/ && $NF != "total" { calls[$NF] = $4; total += $4 }
        END {
            other = total - calls["read"] - calls["write"] - calls["epoll_wait"]
            printf "| %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %.4f |\n", load, gets, cpu, total / n,
                calls["read"] / n, calls["write"] / n, calls["epoll_wait"] / n, other / n
        }' "$work/strace.txt"
done
