#!/usr/bin/env bash
# Whether anything stalls cached socket GETs as the cache grows or a segment rotates or grows: the
# p99.9 of 64 x 1 GETs over 1,000 and over 100,000 keys on one agent, over 100,000 keys on a second
# agent whose segments rotate every 2 s (shared_memory_rotation), and (GROWTH=1) over keys of a
# third, fresh agent while new keys are inserted from a local HTTP provider (token-bench provider):
# once staying under the segment's growth point, once across it. Runs alternated.
#   bash Benchmarks/stall.sh
#   AGENT_BINARY=/path/to/fleet-tokend bash Benchmarks/stall.sh     # measure another build
# Environment (defaults in brackets):
#   ROUNDS [3]  runs of each load, alternated; each load's median run (by p99.9) is printed
#   DURATION [10]  measured seconds per run   WARMUP [2]  seconds run before measuring
#   KEYS [100000]  keys preloaded into both agents (their demo issuer mints each once)
#   ROTATION [2]   the second agent's shared_memory_rotation, seconds
#   GROWTH [1]     also the growth rows: a fresh agent per run, preloaded with 70,000 keys (no
#                  growth: 90,000 stays under 98,304, three quarters of 131,072 slots) or 90,000
#                  (across it), measured over those keys while INSERTS [20000] new keys are fetched
# Prints one markdown table (each run's figures, then the medians). Method: docs/BENCHMARKS-METHOD.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
KEYS=${KEYS:-100000}
ROTATION=${ROTATION:-2}

if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}
LOADGEN=Benchmarks/.build/release/load-gen
GROWTH=${GROWTH:-1}
INSERTS=${INSERTS:-20000}
if [ "$GROWTH" = 1 ]; then
    swift build -c release --package-path Benchmarks --product token-bench >&2
fi

work=$(mktemp -d /tmp/ftd-stall.XXXXXX)
pids=()
cleanup() {
    set +e
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf '{"shared_memory_rotation": %s}\n' "$ROTATION" >"$work/rotating.json"
"$AGENT" serve --demo --socket "$work/steady.sock" --max-entries $((KEYS * 2)) --log-level warning >"$work/steady.log" 2>&1 &
pids+=($!)
"$AGENT" serve --demo --socket "$work/rotating.sock" --config "$work/rotating.json" --max-entries $((KEYS * 2)) \
    --log-level warning >"$work/rotating.log" 2>&1 &
pids+=($!)
for agent in steady rotating; do
    for _ in $(seq 200); do
        [ "$(printf 'PING\n' | socat -t2 - "UNIX-CONNECT:$work/$agent.sock" 2>/dev/null)" = PONG ] && break
        sleep 0.05
    done
    echo "preloading $KEYS keys into the $agent agent..." >&2
    "$LOADGEN" --unix "$work/$agent.sock" --warm --keys "$KEYS" --connections 8 --depth 32 --json >/dev/null
done

if [ "$GROWTH" = 1 ]; then
    Benchmarks/.build/release/token-bench provider >"$work/provider.url" &
    pids+=($!)
    for _ in $(seq 200); do [ -s "$work/provider.url" ] && break; sleep 0.05; done
fi
stats() { printf 'STATS\n' | socat -t2 - "UNIX-CONNECT:$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
run() { # label agent keys
    local out
    out=$("$LOADGEN" --unix "$work/$2.sock" --connections 64 --depth 1 --keys "$3" --duration "$DURATION" \
        --warmup "$WARMUP" --json)
    [ "$(field errors "$out")" = 0 ] || { echo "errors in $1: $out" >&2; exit 1; }
    echo "$1 $(field req_per_s "$out") $(field p99_us "$out") $(field p999_us "$out") $(field max_us "$out")" \
        >>"$work/runs.txt"
    echo "| $1 | $r | $(field req_per_s "$out") | $(field p99_us "$out") | $(field p999_us "$out") | $(field max_us "$out") | |"
}
# A fresh agent on the local provider, preloaded with $2 keys, measured over them while $INSERTS
# new keys are fetched from the provider (they start after the warm-up).
grown() { # label preload
    local sock="$work/grow.sock" out before after
    "$AGENT" serve --socket "$sock" --provider "vehicle=$(cat "$work/provider.url")" --max-entries 200000 \
        --log-level warning >"$work/grow.log" 2>&1 &
    local pid=$!
    for _ in $(seq 200); do
        [ "$(printf 'PING\n' | socat -t2 - "UNIX-CONNECT:$sock" 2>/dev/null)" = PONG ] && break
        sleep 0.05
    done
    "$LOADGEN" --unix "$sock" --warm --keys "$2" --connections 8 --depth 32 --json >/dev/null
    before=$(stats "$sock" shm_generations)
    "$LOADGEN" --unix "$sock" --connections 64 --depth 1 --keys "$2" --duration "$DURATION" \
        --warmup "$WARMUP" --json >"$work/grow.json" &
    local measuring=$!
    sleep $((WARMUP + 1))
    "$LOADGEN" --unix "$sock" --warm --keys "$INSERTS" --first-key "$2" --connections 4 --depth 8 --json >/dev/null
    wait "$measuring"
    after=$(stats "$sock" shm_generations)
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    out=$(cat "$work/grow.json")
    [ "$(field errors "$out")" = 0 ] || { echo "errors in $1: $out" >&2; exit 1; }
    echo "$1 $(field req_per_s "$out") $(field p99_us "$out") $(field p999_us "$out") $(field max_us "$out")" \
        >>"$work/runs.txt"
    echo "| $1 | $r | $(field req_per_s "$out") | $(field p99_us "$out") | $(field p999_us "$out") | $(field max_us "$out") | $((after - before)) |"
}

echo "| load (64 x 1) | run | GET/s | p99 µs | p99.9 µs | max µs | generations made |"
echo "|---|---|---|---|---|---|---|"
labels=("1000 keys" "$KEYS keys" "$KEYS keys, rotating every $ROTATION s")
[ "$GROWTH" = 1 ] && labels+=("70000 keys, $INSERTS inserted" "90000 keys, $INSERTS inserted across a growth")
for r in $(seq "$ROUNDS"); do
    run "1000 keys" steady 1000
    run "$KEYS keys" steady "$KEYS"
    run "$KEYS keys, rotating every $ROTATION s" rotating "$KEYS"
    if [ "$GROWTH" = 1 ]; then
        grown "70000 keys, $INSERTS inserted" 70000
        grown "90000 keys, $INSERTS inserted across a growth" 90000
    fi
done
generations=$(printf 'STATS\n' | socat -t2 - "UNIX-CONNECT:$work/rotating.sock" | tr ' ' '\n' \
    | sed -n 's/^shm_generations=//p')
echo
echo "Medians by p99.9 over $ROUNDS runs (the rotating agent made $generations generations):"
echo
echo "| load (64 x 1) | GET/s | p99 µs | p99.9 µs | max µs |"
echo "|---|---|---|---|---|"
for label in "${labels[@]}"; do
    awk -v prefix="$label " 'index($0, prefix) == 1 { print substr($0, length(prefix) + 1) }' "$work/runs.txt" \
        | sort -k3 -g \
        | awk -v label="$label" '{ row[NR] = $0 } END {
            split(row[int((NR + 1) / 2)], f, " ")
            printf "| %s | %s | %s | %s | %s |\n", label, f[1], f[2], f[3], f[4]
        }'
done
