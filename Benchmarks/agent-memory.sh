#!/usr/bin/env bash
# What holding KEYS tokens costs the agent's own process, with shared memory on and off: VmRSS,
# RssAnon (its private heap: the cache's entries, and the tokens it keeps itself), RssShmem (the
# segment pages it touched), RssFile (the binary's and libraries' file-backed pages) and VmHWM
# (the peak of VmRSS) from /proc/PID/status, after load-gen sent each key once.
#   bash Benchmarks/agent-memory.sh                                   # KEYS=100000, this tree
#   AGENTS="before=/path/to/old/fleet-tokend after=.build-bench-release/release/fleet-tokend" \
#       bash Benchmarks/agent-memory.sh                               # builds side by side
#   MODES=on bash Benchmarks/agent-memory.sh                          # shared memory on only
# Results: docs/BENCHMARKS.md; method: docs/BENCHMARKS-METHOD.md ("agent memory, 100,000 tokens").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh
KEYS=${KEYS:-100000}
MODES=${MODES:-"on off"}
if [ -z "${AGENTS:-}" ]; then
    swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
    AGENTS="this=.build-bench-release/release/fleet-tokend"
fi
swift build -c release --package-path Benchmarks --product load-gen >&2
LOADGEN=Benchmarks/.build/release/load-gen

work=$(mktemp -d /tmp/ftd-agent-memory.XXXXXX)
agent=""
cleanup() {
    [ -n "$agent" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
status_mib() { awk -v f="$1:" '$1 == f {printf "%.1f", $2 / 1024}' "/proc/$2/status"; }

echo "## The agent's memory with $KEYS tokens ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo "| agent | shared memory | VmRSS MiB | RssAnon MiB | RssShmem MiB | RssFile MiB | VmHWM MiB | segments MiB | tokens held outside |"
echo "|---|---|---|---|---|---|---|---|---|"
for entry in $AGENTS; do
    label=${entry%%=*}
    binary=${entry#*=}
    for mode in $MODES; do
        flags=()
        [ "$mode" = off ] && flags=(--no-shared-memory)
        rm -f "$work/agent.sock"
        "$binary" serve --demo --socket "$work/agent.sock" --log-level warning \
            "${flags[@]}" >"$work/agent.log" 2>&1 &
        agent=$!
        for _ in $(seq 100); do [ -S "$work/agent.sock" ] && break; sleep 0.1; done
        "$LOADGEN" --unix "$work/agent.sock" --warm --keys "$KEYS" --connections 8 --depth 32 --json >"$work/warm.json"
        sleep 2
        stats=$(printf 'STATS\n' | socat -t5 - "UNIX-CONNECT:$work/agent.sock")
        shm_bytes=$(sed -n 's/.* shm_bytes=\([0-9]*\).*/\1/p' <<<"$stats")
        outside=$(sed -n 's/.* shm_held_outside=\([0-9]*\).*/\1/p' <<<"$stats")
        echo "| $label | $mode | $(status_mib VmRSS $agent) | $(status_mib RssAnon $agent) |" \
            "$(status_mib RssShmem $agent) | $(status_mib RssFile $agent) | $(status_mib VmHWM $agent) |" \
            "$(awk -v b="${shm_bytes:-0}" 'BEGIN {printf "%.1f", b / 1048576}') | ${outside:--} |"
        kill "$agent"
        wait "$agent" 2>/dev/null || true
        agent=""
    done
done
echo
echo "Tokens sent: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["requests"])' "$work/warm.json") per run (load-gen --warm, 8 connections, 32 deep)."
