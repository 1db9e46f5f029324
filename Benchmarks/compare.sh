#!/usr/bin/env bash
# fleet-tokend against redis-server under the same closed-loop load, in one run, one table.
#   bash Benchmarks/compare.sh
#   DURATION=3 bash Benchmarks/compare.sh        # shorter runs
# Environment (defaults in brackets):
#   DURATION [10]  measured seconds per run     WARMUP [2]        seconds run before measuring
#   CONNECTIONS ["1 64"]  DEPTHS ["1 32"]  KEYSETS ["64 100000"]  the matrix
#   LOADS  connections x in flight as "1x1 64x1 1x32", instead of every CONNECTIONS x DEPTHS pair
#   REPEATS [1]  runs of each server per cell, alternated (agent, Redis, agent, ...); each side's
#                median run (by req/s) is the one printed
#   FLOOR_LOOPS [0]  also run epoll-floor (a bare epoll loop answering from a fixed table: the
#                socket's floor) with this many loops, in the same alternation (agent, floor, Redis)
#   FLOOR_LOADS  the loads (as in LOADS) at which the floor runs (default: every load)
#   JSON_OUT  also write each cell's median runs (load-gen's JSON) to this file, one line a cell
#   THREADS [1]  load-gen threads               CLIENT_ROWS [1]   also run token-bench (0: skip)
#   AGENT_BINARY  the agent to measure (default: this tree's release build, built first)
#   CLIENT_ITERATIONS [20000]  token-bench --iterations
# Builds the agent (release, .build-bench-release) and the Benchmarks package (release), installs
# redis-server when missing (root), starts the agent on its demo issuer and redis-server on Unix
# sockets (and epoll-floor, with FLOOR_LOOPS), preloads the same keys into both, runs load-gen over
# the matrix, prints one markdown table plus memory, and stops everything it started.
# `bash Benchmarks/floor.sh` is this script with the floor's defaults.
# Results: docs/BENCHMARKS.md; method: docs/BENCHMARKS-METHOD.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-"1 64"}
DEPTHS=${DEPTHS:-"1 32"}
KEYSETS=${KEYSETS:-"64 100000"}
THREADS=${THREADS:-1}
CLIENT_ROWS=${CLIENT_ROWS:-1}
CLIENT_ITERATIONS=${CLIENT_ITERATIONS:-20000}
REPEATS=${REPEATS:-1}
LOADS=${LOADS:-}
if [ -z "$LOADS" ]; then
    for connections in $CONNECTIONS; do
        for depth in $DEPTHS; do LOADS+="${connections}x$depth "; done
    done
fi
FLOOR_LOOPS=${FLOOR_LOOPS:-0}
FLOOR_LOADS=${FLOOR_LOADS:-$LOADS}
JSON_OUT=${JSON_OUT:-}
[ -z "$JSON_OUT" ] || : >"$JSON_OUT"

source Benchmarks/ensure-redis.sh

echo "building (release)..." >&2
if [ -z "${AGENT_BINARY:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
fi
if [ "$CLIENT_ROWS" != 0 ]; then
    swift build -c release --package-path Benchmarks >&2
else
    swift build -c release --package-path Benchmarks --product load-gen >&2
    [ "$FLOOR_LOOPS" = 0 ] || swift build -c release --package-path Benchmarks --product epoll-floor >&2
fi
# AGENT_BINARY measures another build of the agent (e.g. an earlier commit's) with the same load.
AGENT=${AGENT_BINARY:-.build-bench-release/release/fleet-tokend}
LOADGEN=Benchmarks/.build/release/load-gen
TOKENBENCH=Benchmarks/.build/release/token-bench

work=$(mktemp -d /tmp/ftd-compare.XXXXXX)
agent_pid=""
redis_pid=""
floor_pid=""
bench_pid=""
loadgen_pid=""
cleanup() {
    set +e
    for pid in $loadgen_pid $agent_pid $redis_pid $floor_pid; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    if [ -n "$bench_pid" ]; then
        kill "$bench_pid" 2>/dev/null
        wait "$bench_pid" 2>/dev/null
        # token-bench's own redis-server outlives it (and blocks SIGTERM), and its agent does when
        # token-bench is interrupted: end both by their paths under token-bench's directory.
        for pid in $(pgrep -f "/tmp/ftd-bench-$bench_pid/" || true); do kill -KILL "$pid" 2>/dev/null || true; done
        rm -rf "/tmp/ftd-bench-$bench_pid"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

max_keys=0
for keys in $KEYSETS; do
    if [ "$keys" -gt "$max_keys" ]; then max_keys=$keys; fi
done
entries=$((max_keys > 100000 ? max_keys : 100000))

"$AGENT" serve --demo --socket "$work/agent.sock" --max-entries "$entries" --log-level warning >"$work/agent.log" 2>&1 &
agent_pid=$!
redis-server --port 0 --unixsocket "$work/redis.sock" --unixsocketperm 700 --save '' --appendonly no \
    --logfile "$work/redis.log" &
redis_pid=$!
if [ "$FLOOR_LOOPS" != 0 ]; then
    Benchmarks/.build/release/epoll-floor --unix "$work/floor.sock" --loops "$FLOOR_LOOPS" --keys "$max_keys" &
    floor_pid=$!
fi

wait_for() { # socket, request, expected first reply
    for _ in $(seq 200); do
        if [ -S "$1" ] && [ "$(printf '%b' "$2" | socat -t2 - "UNIX-CONNECT:$1" 2>/dev/null | head -c ${#3})" = "$3" ]; then
            return 0
        fi
        sleep 0.05
    done
    echo "nothing answers on $1" >&2
    exit 1
}
wait_for "$work/agent.sock" 'PING\n' PONG
wait_for "$work/redis.sock" 'PING\r\n' +PONG
[ "$FLOOR_LOOPS" = 0 ] || wait_for "$work/floor.sock" 'GET vehicle bench-0\n' OK

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
agent_rss_idle=$(rss_kib "$agent_pid")
redis_rss_idle=$(rss_kib "$redis_pid")

token=$(printf 'GET vehicle bench-0\n' | socat -t5 - "UNIX-CONNECT:$work/agent.sock" | awk '{print $2}')
token_bytes=${#token}
[ "$token_bytes" -gt 0 ] || { echo "the agent gave no token for bench-0" >&2; exit 1; }

echo "preloading $max_keys keys: agent (demo issuer mints each once), redis (SET $token_bytes-byte values)..." >&2
agent_warm=$("$LOADGEN" --unix "$work/agent.sock" --warm --keys "$max_keys" --connections 8 --depth 32 --json)
redis_warm=$("$LOADGEN" --unix "$work/redis.sock" --protocol redis --set-bytes "$token_bytes" --keys "$max_keys" \
    --connections 4 --depth 32 --json)
for warm in "$agent_warm" "$redis_warm"; do
    if [ "$(field errors "$warm")" != 0 ]; then
        echo "preload failed: $warm" >&2
        exit 1
    fi
done

run() { # protocol, socket, keys, connections, depth, output file
    # In the background and waited for, so a signal stops the script at once, not after the run.
    "$LOADGEN" --unix "$2" --protocol "$1" --keys "$3" --connections "$4" --depth "$5" \
        --duration "$DURATION" --warmup "$WARMUP" --threads "$THREADS" --json >"$6" &
    loadgen_pid=$!
    wait "$loadgen_pid"
    loadgen_pid=""
}
median_run() { # the run files of one side: the one whose req/s is the median (the lower middle)
    local rated=()
    for file in "$@"; do rated+=("$(field req_per_s "$(<"$file")") $file"); done
    printf '%s\n' "${rated[@]}" | sort -n | sed -n "$(((${#rated[@]} + 1) / 2))p" | cut -d' ' -f2
}
rates() { for file in "$@"; do field req_per_s "$(<"$file")"; done | paste -sd, -; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
runs_note=""
errors_note=""
for keys in $KEYSETS; do
    for load in $LOADS; do
        connections=${load%x*}
        depth=${load#*x}
        agent_runs=()
        redis_runs=()
        floor_runs=()
        with_floor=0
        if [ "$FLOOR_LOOPS" != 0 ]; then
            case " $FLOOR_LOADS " in *" $load "*) with_floor=1 ;; esac
        fi
        for repeat in $(seq "$REPEATS"); do
            echo "  $connections conn x $depth in flight x $keys keys (run $repeat of $REPEATS)..." >&2
            run agent "$work/agent.sock" "$keys" "$connections" "$depth" "$work/agent-$repeat.json"
            agent_runs+=("$work/agent-$repeat.json")
            if [ "$with_floor" = 1 ]; then
                # epoll-floor speaks the agent's protocol.
                run agent "$work/floor.sock" "$keys" "$connections" "$depth" "$work/floor-$repeat.json"
                floor_runs+=("$work/floor-$repeat.json")
            fi
            run redis "$work/redis.sock" "$keys" "$connections" "$depth" "$work/redis-$repeat.json"
            redis_runs+=("$work/redis-$repeat.json")
        done
        agent=$(<"$(median_run "${agent_runs[@]}")")
        redis=$(<"$(median_run "${redis_runs[@]}")")
        floor_cells="| – | – |"
        floor_json=""
        if [ "$with_floor" = 1 ]; then
            floor=$(<"$(median_run "${floor_runs[@]}")")
            f_rate=$(field req_per_s "$floor")
            floor_cells="| $f_rate | $(awk -v a="$(field req_per_s "$agent")" -v f="$f_rate" 'BEGIN {printf (f > 0 ? "%.2fx" : "–"), a / f}') |"
            floor_json=", \"floor\": $floor, \"floor_runs\": [$(rates "${floor_runs[@]}")], \"floor_loops\": $FLOOR_LOOPS"
        fi
        runs_note+="- $connections x $depth x $keys: agent $(rates "${agent_runs[@]}")"
        [ "$with_floor" = 0 ] || runs_note+="; floor $(rates "${floor_runs[@]}")"
        runs_note+="; Redis $(rates "${redis_runs[@]}")"$'\n'
        if [ -n "$JSON_OUT" ]; then
            echo "{\"keys\": $keys, \"connections\": $connections, \"depth\": $depth, \"agent\": $agent, \"redis\": $redis, \"agent_runs\": [$(rates "${agent_runs[@]}")], \"redis_runs\": [$(rates "${redis_runs[@]}")]$floor_json}" >>"$JSON_OUT"
        fi
        a_rate=$(field req_per_s "$agent")
        r_rate=$(field req_per_s "$redis")
        # The yardsticks for the shared-memory client row: Redis at 64 connections with one GET
        # in flight each (issue 8's "64 connections" load), and its best 64-connection row
        # (pipelined), both the highest over the key sets.
        if [ "$connections" = 64 ] && awk -v r="$r_rate" -v b="${redis_64_best:-0}" 'BEGIN {exit !(r > b)}'; then
            redis_64_best=$r_rate
        fi
        if [ "$connections" = 64 ] && [ "$depth" = 1 ] \
            && awk -v r="$r_rate" -v b="${redis_64_single:-0}" 'BEGIN {exit !(r > b)}'; then
            redis_64_single=$r_rate
        fi
        ratio=$(awk -v a="$a_rate" -v r="$r_rate" 'BEGIN {printf (r > 0 ? "%.2fx" : "–"), a / r}')
        for file in "${agent_runs[@]}" "${floor_runs[@]}" "${redis_runs[@]}"; do
            result=$(<"$file")
            errors=$(field errors "$result")
            broken=$(field broken_connections "$result")
            if [ "$errors" != 0 ] || [ "$broken" != 0 ]; then
                errors_note+="- $(basename "$file" .json), $connections conn x $depth x $keys keys: $errors error replies, $broken broken connections"$'\n'
            fi
        done
        row="| $connections x $depth x $keys | $a_rate | $(field p50_us "$agent") | $(field p99_us "$agent") | $(field p999_us "$agent") | $r_rate | $(field p50_us "$redis") | $(field p99_us "$redis") | $(field p999_us "$redis") | $ratio |"
        [ "$FLOOR_LOOPS" = 0 ] || row+=" ${floor_cells#| }"
        rows+=("$row")
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

stats=$(printf 'STATS\n' | socat -t5 - "UNIX-CONNECT:$work/agent.sock")
held=$(sed -n 's/.* entries=\([0-9]*\).*/\1/p' <<<"$stats")
redis_used=$(redis-cli -s "$work/redis.sock" info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}')

echo
echo "## fleet-tokend vs redis-server, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "$(nproc) cores, $(uname -sr), $(swift --version 2>/dev/null | head -1 | sed 's/ (.*//'), $(redis-server --version | awk '{print $1, $2, $3}')."
echo "load-gen: closed loop, $THREADS thread(s), ${DURATION} s measured after ${WARMUP} s warm-up per run; keys walked in order from"
echo "a different start per connection; agent \`GET vehicle bench-<n>\`, Redis inline \`GET bench-<n>\`; tokens/values $token_bytes bytes."
if [ "$REPEATS" -gt 1 ]; then
    echo "$REPEATS runs of each server per cell, alternated (agent, Redis, agent, ...; agent, floor, Redis, ... where the floor runs); each side's median run (by req/s) is shown."
fi
if [ "$FLOOR_LOOPS" != 0 ]; then
    echo "The floor: epoll-floor, $FLOOR_LOOPS loop(s), a bare epoll server answering from a fixed table, run between the agent and Redis at $FLOOR_LOADS."
fi
echo "Preload: agent $(field requests "$agent_warm") tokens minted in $(field seconds "$agent_warm") s ($(field req_per_s "$agent_warm")/s), Redis $(field requests "$redis_warm") SETs in $(field seconds "$redis_warm") s."
echo "Load average before/after the matrix: $load_before / $load_after."
echo
if [ "$FLOOR_LOOPS" = 0 ]; then
    echo "| load (conns x in flight x keys) | agent req/s | agent p50 µs | agent p99 µs | agent p99.9 µs | redis req/s | redis p50 µs | redis p99 µs | redis p99.9 µs | agent/redis req/s |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
else
    echo "| load (conns x in flight x keys) | agent req/s | agent p50 µs | agent p99 µs | agent p99.9 µs | redis req/s | redis p50 µs | redis p99 µs | redis p99.9 µs | agent/redis req/s | floor req/s | agent/floor req/s |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
fi
printf '%s\n' "${rows[@]}"
echo
if [ "$REPEATS" -gt 1 ]; then
    echo "Every run's req/s, in the order run:"
    echo
    printf '%s' "$runs_note"
    echo
fi
if [ -n "$errors_note" ]; then
    echo "Errors:"
    printf '%s' "$errors_note"
else
    echo "No error replies, no broken connections."
fi
echo
echo "| memory | agent | redis |"
echo "|---|---|---|"
echo "| RSS idle, before preload (MiB) | $(mib "$agent_rss_idle") | $(mib "$redis_rss_idle") |"
echo "| RSS after the $max_keys-key runs (MiB) | $(mib "$(rss_kib "$agent_pid")") | $(mib "$(rss_kib "$redis_pid")") |"
echo "| peak RSS (VmHWM, MiB) | $(mib "$(hwm_kib "$agent_pid")") | $(mib "$(hwm_kib "$redis_pid")") |"
echo "| tokens held x token bytes (MiB) | $held x $token_bytes = $(mib $((held * token_bytes / 1024))) | $(redis-cli -s "$work/redis.sock" dbsize | tr -d '\r') x $token_bytes, used_memory $(mib $((redis_used / 1024))) |"

kill "$agent_pid" "$redis_pid" $floor_pid 2>/dev/null || true
wait "$agent_pid" "$redis_pid" $floor_pid 2>/dev/null || true
agent_pid=""
redis_pid=""
floor_pid=""

if [ "$CLIENT_ROWS" != 0 ]; then
    echo
    echo "### Client rows (token-bench --iterations $CLIENT_ITERATIONS, its own agent, provider and Redis)"
    echo
    "$TOKENBENCH" --agent "$AGENT" --iterations "$CLIENT_ITERATIONS" >"$work/client.txt" 2>&1 &
    bench_pid=$!
    wait "$bench_pid" || { cat "$work/client.txt" >&2; echo "token-bench failed" >&2; exit 1; }
    grep -E '^\|' "$work/client.txt"
    echo
    grep -E '^- ' "$work/client.txt"
    for row in "64 ready keys" "64 keys"; do
        shared=$(awk -F'|' -v row="client.token, shared memory, $row " \
            'index($2, row) && $3+0 > 1 {gsub(/ /, "", $7); print $7}' "$work/client.txt")
        if [ -n "$shared" ] && [ -n "${redis_64_single:-}" ]; then
            echo "- shared-memory client, 32 tasks over $row, one process: $shared tokens/s against Redis GET at 64 connections, one in flight each, $redis_64_single req/s: $(awk -v a="$shared" -v r="$redis_64_single" 'BEGIN {printf "%.1fx", a / r}'); against Redis's best 64-connection row (pipelined) $redis_64_best req/s: $(awk -v a="$shared" -v r="$redis_64_best" 'BEGIN {printf "%.1fx", a / r}')"
        fi
    done
fi
