#!/usr/bin/env bash
# Instructions per cached GET: the release agent under valgrind's callgrind, a fixed number of GETs
# from load-gen, the instructions counted over exactly those GETs.
#   bash Benchmarks/callgrind.sh
#   AGENT_BINARY=/path/to/fleet-tokend bash Benchmarks/callgrind.sh     # measure another build
# Environment (defaults in brackets):
#   REQUESTS [20000]  GETs per measured window   KEYS [64]  keys bench-0 ... bench-<KEYS-1>
#   DEPTHS ["1 32"]   requests in flight on the one connection, one window set per depth
#   ROUNDS [2]        windows per depth (each its own count: they should agree)
#   OUT [Benchmarks/.callgrind]  where the per-window profiles (callgrind_annotate, inclusive) go
#   DETERMINISTIC_HASHING [1]  run the agent with SWIFT_DETERMINISTIC_HASHING=1 (0: a random seed)
#   AGENT_BINARY      the agent to measure (default: this tree's release build)
#   KEEP_RAW [0]      1: also keep each window's callgrind output in OUT (for callgrind_annotate
#                     --tree=caller, or kcachegrind)
# Builds the agent (release, .build-bench-release) and load-gen (release, Benchmarks/.build),
# installs valgrind when missing (root), starts `fleet-tokend serve` on its demo issuer under
# callgrind, warms the keys (`load-gen --warm`), then per window: zeroes the counters
# (`callgrind_control -z`), sends REQUESTS GETs on one connection at the given depth
# (`load-gen --requests`), dumps (`callgrind_control -d`), and divides the window's instructions
# (Ir, all threads) by its GETs. Method: docs/BENCHMARKS-METHOD.md ("instructions per socket GET").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

REQUESTS=${REQUESTS:-20000}
KEYS=${KEYS:-64}
DEPTHS=${DEPTHS:-"1 32"}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-Benchmarks/.callgrind}
DETERMINISTIC_HASHING=${DETERMINISTIC_HASHING:-1}
KEEP_RAW=${KEEP_RAW:-0}

if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "valgrind is missing: apt-get install -y valgrind, or run as root" >&2
        exit 1
    fi
    echo "installing valgrind" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

echo "building (release)..." >&2
if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}
LOADGEN=Benchmarks/.build/release/load-gen

work=$(mktemp -d /tmp/ftd-callgrind.XXXXXX)
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

# Two workarounds for Debian 12's valgrind 3.19, neither of which touches the code measured:
# - it cannot read the DWARF 5 debug information Swift 6.3 writes ("unhandled dwarf2 abbrev form
#   code 0x25", then it gives up), so it runs a copy of the agent without debug information
#   (`strip --strip-debug`; the symbol table stays, so functions keep their names);
# - its sigsuspend wrapper writes to the signal mask it is given, and libdispatch parks the main
#   thread (dispatch_main) in sigsuspend on a mask in read-only memory: valgrind dies of SIGSEGV.
#   A preloaded sigsuspend that passes a copy of the mask avoids it (the parked thread runs no
#   code of the agent's).
cp "$AGENT" "$work/fleet-tokend"
strip --strip-debug "$work/fleet-tokend"
cat >"$work/sigsuspend.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, 8);
}
C
cc -O2 -shared -fPIC -o "$work/sigsuspend.so" "$work/sigsuspend.c"

# Swift seeds its hashing at random in each process, which places the keys differently in the
# agent's tables at each start: the counts of one binary moved by up to 3% between two agents
# (25,302 and 25,696 a GET at depth 1), while the windows of one agent agreed within 0.05%. With a
# fixed seed two agents agree as closely as two windows, so commits compare.
hashing=()
[ "$DETERMINISTIC_HASHING" = 0 ] || hashing=(SWIFT_DETERMINISTIC_HASHING=1)
# The whole run is instrumented (counting starts at once); the windows are cut out with -z / -d.
env "${hashing[@]}" LD_PRELOAD="$work/sigsuspend.so" valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
    "$work/fleet-tokend" serve --demo --socket "$work/agent.sock" --log-level warning >"$work/agent.log" 2>&1 &
agent_pid=$!

# Under callgrind the demo issuer's RSA key takes a while: wait up to 5 minutes for a PONG.
answered=0
for _ in $(seq 1500); do
    if [ -S "$work/agent.sock" ] \
        && [ "$(printf 'PING\n' | socat -t5 - "UNIX-CONNECT:$work/agent.sock" 2>/dev/null | head -c 4)" = PONG ]; then
        answered=1
        break
    fi
    if ! kill -0 "$agent_pid" 2>/dev/null; then
        echo "the agent exited:" >&2
        cat "$work/agent.log" >&2
        exit 1
    fi
    sleep 0.2
done
if [ "$answered" != 1 ]; then
    echo "the agent did not answer PING under callgrind" >&2
    exit 1
fi

field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
warm=$("$LOADGEN" --unix "$work/agent.sock" --warm --keys "$KEYS" --depth 8 --json)
if [ "$(field errors "$warm")" != 0 ] || [ "$(field requests "$warm")" != "$KEYS" ]; then
    echo "warming failed: $warm" >&2
    exit 1
fi

mkdir -p "$OUT"
dump=0
echo "| depth | round | GETs | Ir (window, all threads) | Ir per GET |"
echo "|---|---|---|---|---|"
for depth in $DEPTHS; do
    for round in $(seq "$ROUNDS"); do
        callgrind_control -z "$agent_pid" >/dev/null
        run=$("$LOADGEN" --unix "$work/agent.sock" --requests "$REQUESTS" --keys "$KEYS" --depth "$depth" --json)
        callgrind_control -d "$agent_pid" >/dev/null
        dump=$((dump + 1))
        file="$work/callgrind.out.$dump"
        for _ in $(seq 100); do
            [ -s "$file" ] && grep -q '^totals:' "$file" && break
            sleep 0.1
        done
        # `summary:` is the dump's total of each event (here only Ir) over every thread.
        if [ "$(field errors "$run")" != 0 ] || [ "$(field requests "$run")" != "$REQUESTS" ]; then
            echo "the window's GETs failed: $run" >&2
            exit 1
        fi
        total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$file")
        per=$(awk -v t="$total" -v n="$REQUESTS" 'BEGIN {printf "%.0f", t / n}')
        echo "| $depth | $round | $REQUESTS | $total | $per |"
        profile="$OUT/depth-$depth-round-$round.txt"
        {
            echo "# fleet-tokend under callgrind: $REQUESTS cached GETs, depth $depth, $KEYS keys, round $round"
            echo "# agent: $AGENT; window total Ir $total, $per per GET"
            echo "# top functions by inclusive cost (callgrind_annotate --inclusive=yes), demangled"
            callgrind_annotate --inclusive=yes --threshold=100 "$file" 2>/dev/null | sed -n 1,120p \
                | swift demangle --simplified
        } >"$profile"
        [ "$KEEP_RAW" = 0 ] || cp "$file" "$OUT/depth-$depth-round-$round.callgrind.out"
    done
done
echo "profiles: $OUT/depth-*-round-*.txt" >&2
