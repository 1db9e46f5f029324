#!/usr/bin/env bash
# How much memory the shared-memory path costs per host: one agent holding KEYS tokens, READERS
# processes (the C reader of Examples/shm-reader) that each mapped the vehicle segment and read
# every key, and each process's Rss, Pss and Pss_Shmem from /proc/PID/smaps_rollup. The segment's
# pages are shared: their cost is counted once (PSS), however many processes map them.
#   bash Benchmarks/shm-memory.sh                 # KEYS=10000 READERS=50
#   AGENT_BINARY=.build/release/fleet-tokend KEYS=100000 bash Benchmarks/shm-memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh
KEYS=${KEYS:-10000}
READERS=${READERS:-50}
AGENT=${AGENT_BINARY:-.build/debug/fleet-tokend}
[ -x "$AGENT" ] || swift build --product fleet-tokend >&2
work=$(mktemp -d /tmp/ftd-shm-memory.XXXXXX)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cc -O2 -std=c11 -I Sources/CTokenSegment/include -I libfleet-tokend-reader -o "$work/shm-reader" \
    Examples/shm-reader/shm_reader.c libfleet-tokend-reader/fleet_tokend_reader.c
"$AGENT" serve --demo --socket "$work/tokens.sock" --log-level warning > "$work/agent.log" 2>&1 &
agent=$!
pids+=("$agent")
for _ in $(seq 100); do [ -S "$work/tokens.sock" ] && break; sleep 0.1; done
echo "caching $KEYS vehicle tokens (demo issuer)..." >&2
for start in $(seq 0 1000 $((KEYS - 1))); do
    end=$((start + 999 < KEYS - 1 ? start + 999 : KEYS - 1))
    for i in $(seq "$start" "$end"); do printf 'GET vehicle mem-%d\n' "$i"; done |
        socat -t 60 - "UNIX-CONNECT:$work/tokens.sock" | grep -c '^OK' > /dev/null
done
# A growth started near the end (at three quarters of a segment's slots) may still be copying
# beside the segment: wait until only the current segments are mapped (STATS shm_mapped_bytes ==
# shm_bytes), so the readers map the segment they keep, not one about to be retired.
for _ in $(seq 300); do
    stats=$(printf 'STATS\n' | socat -t5 - "UNIX-CONNECT:$work/tokens.sock")
    mapped=$(tr ' ' '\n' <<<"$stats" | sed -n 's/^shm_mapped_bytes=//p')
    current=$(tr ' ' '\n' <<<"$stats" | sed -n 's/^shm_bytes=//p')
    [ "$mapped" = "$current" ] && break
    sleep 0.1
done
token_bytes=$(printf 'GET vehicle mem-0\n' | socat -t5 - "UNIX-CONNECT:$work/tokens.sock" | awk '{print length($2)}')
echo "starting $READERS readers, each reading every key once..." >&2
for r in $(seq "$READERS"); do
    mkfifo "$work/in-$r"
    # Its replies are only counted (written out, 100,000 keys x 50 readers would be 3.5 GB): the
    # count is written when the reader's input is closed, after the memory is read.
    "$work/shm-reader" "$work/tokens.sock" vehicle < "$work/in-$r" 2>"$work/err-$r" \
        > >(awk '/^HIT/ {n++} END {print n + 0}' > "$work/out-$r") &
    pids+=("$!")
    exec {fd}> "$work/in-$r"
    eval "reader_fd_$r=$fd"
    # Every key once: every page of the segment's table is touched by every reader.
    seq -f 'mem-%.0f' 0 $((KEYS - 1)) >&$fd
done
sleep 2
total_pss=0; total_rss=0; total_shmem=0
for r in $(seq "$READERS"); do
    pid=${pids[$r]}
    read -r rss pss shmem < <(awk '/^Rss:/ {r=$2} /^Pss:/ {p=$2} /^Pss_Shmem:/ {s=$2} END {print r, p, s}' "/proc/$pid/smaps_rollup")
    total_rss=$((total_rss + rss)); total_pss=$((total_pss + pss)); total_shmem=$((total_shmem + shmem))
done
read -r arss apss ashmem < <(awk '/^Rss:/ {r=$2} /^Pss:/ {p=$2} /^Pss_Shmem:/ {s=$2} END {print r, p, s}' "/proc/$agent/smaps_rollup")
for r in $(seq "$READERS"); do eval "exec {reader_fd_$r}>&-"; done
for r in $(seq "$READERS"); do wait "${pids[$r]}" 2>/dev/null || true; done
hits=0
for r in $(seq "$READERS"); do
    for _ in $(seq 100); do [ -s "$work/out-$r" ] && break; sleep 0.1; done
    hits=$((hits + $(cat "$work/out-$r" 2>/dev/null || echo 0)))
done
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
shm_bytes=$(sed -n 's/.* shm_bytes=\([0-9]*\).*/\1/p' <<<"$stats")
echo
echo "## Shared-memory cost, $KEYS tokens of $token_bytes bytes, $READERS reader processes ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo "Reads that hit: $hits of $((KEYS * READERS)). Segments: $(mib $((shm_bytes / 1024))) MiB in all (every kind's; the vehicle segment holds the tokens)."
echo
echo "| | Rss MiB | Pss MiB | Pss_Shmem MiB |"
echo "|---|---|---|---|"
echo "| agent | $(mib "$arss") | $(mib "$apss") | $(mib "$ashmem") |"
echo "| $READERS readers, summed | $(mib "$total_rss") | $(mib "$total_pss") | $(mib "$total_shmem") |"
echo "| one reader, average | $(mib $((total_rss / READERS))) | $(mib $((total_pss / READERS))) | $(mib $((total_shmem / READERS))) |"
echo "| all processes, summed | $(mib $((arss + total_rss))) | $(mib $((apss + total_pss))) | $(mib $((ashmem + total_shmem))) |"
echo
echo "Token bytes held: $KEYS x $token_bytes = $(mib $((KEYS * token_bytes / 1024))) MiB."
