#!/usr/bin/env bash
# Instructions per cached GET: the release agent under valgrind's callgrind, a fixed number of GETs
# from load-gen, the instructions counted over exactly those GETs, and the calls of swift_retain and
# swift_release among them; then the instructions of a worker's read of a cached token from the
# agent's shared-memory segment, by FleetTokenClient's default path and by the C reader.
#   bash Benchmarks/callgrind.sh
#   AGENT_BINARY=/path/to/fleet-tokend bash Benchmarks/callgrind.sh     # measure another build
# Environment (defaults in brackets):
#   REQUESTS [20000]  GETs per measured window   KEYS [64]  keys bench-0 ... bench-<KEYS-1>
#   DEPTHS ["1 32"]   requests in flight on the one connection, one window set per depth; an entry
#                     CxD (e.g. 64x1) sends from C connections with D in flight on each
#   ROUNDS [2]        windows per depth (each its own count: they should agree)
#   OUT [Benchmarks/.callgrind]  where the per-window profiles (callgrind_annotate, inclusive) go
#   DETERMINISTIC_HASHING [1]  run the agent with SWIFT_DETERMINISTIC_HASHING=1 (0: a random seed)
#   AGENT_BINARY      the agent to measure (default: this tree's release build)
#   KEEP_RAW [0]      1: also keep each window's callgrind output in OUT (for callgrind_annotate
#                     --tree=caller, or kcachegrind)
#   CLIENT_READS ["20000 220000"]  the two read counts of the shared-memory rows ("": no such rows)
#   CLIENT_KEYS [64]  keys the readers go round (bench-0 ...; a power of two, at most KEYS)
# Builds the agent (release, .build-bench-release) and load-gen (release, Benchmarks/.build),
# installs valgrind when missing (root), starts `fleet-tokend serve` on its demo issuer under
# callgrind, warms the keys (`load-gen --warm`), then per window: zeroes the counters
# (`callgrind_control -z`), sends REQUESTS GETs on one connection at the given depth
# (`load-gen --requests`), dumps (`callgrind_control -d`), and divides the window's instructions
# (Ir, all threads) and its calls of swift_retain and swift_release (callgrind's call counts, summed
# over their callers) by its GETs. Then, per round, `token-bench shm-reads` (FleetTokenClient's
# default path) and Benchmarks/shm-reads.c (libfleet-tokend-reader) each read the same cached
# tokens from the agent's segment under callgrind, whole runs at the two CLIENT_READS counts:
# (Ir(N2) - Ir(N1)) / (N2 - N1) is a read's cost, the start-up cancelled.
# Method: docs/BENCHMARKS-METHOD.md ("instructions per socket GET", "instructions per
# shared-memory read").
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
CLIENT_READS=${CLIENT_READS-"20000 220000"}
CLIENT_KEYS=${CLIENT_KEYS:-64}
reads_low="" reads_high=""
if [ -n "$CLIENT_READS" ]; then
    read -r reads_low reads_high <<<"$CLIENT_READS"
    if ! [ "${reads_low:-x}" -ge 0 ] 2>/dev/null || ! [ "${reads_high:-x}" -gt "$reads_low" ] 2>/dev/null; then
        echo "CLIENT_READS must be two counts, the second the larger: $CLIENT_READS" >&2
        exit 64
    fi
    if [ "$CLIENT_KEYS" -gt "$KEYS" ] || [ $((CLIENT_KEYS & (CLIENT_KEYS - 1))) != 0 ]; then
        echo "CLIENT_KEYS must be a power of two, at most KEYS ($KEYS): $CLIENT_KEYS" >&2
        exit 64
    fi
fi

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
[ -z "$CLIENT_READS" ] || swift build -c release --package-path Benchmarks --product token-bench >&2
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
if [ -n "$CLIENT_READS" ]; then
    # The readers of the shared-memory rows: token-bench (stripped as the agent is, for the same
    # reason) and the C reader's program, built by its one cc line.
    cp Benchmarks/.build/release/token-bench "$work/token-bench"
    strip --strip-debug "$work/token-bench"
    cc -O2 -std=c11 -I Sources/CTokenSegment/include -I libfleet-tokend-reader -o "$work/shm-reads" \
        Benchmarks/shm-reads.c libfleet-tokend-reader/fleet_tokend_reader.c
fi

# The calls of the Swift runtime's reference counting in a callgrind output file: every `calls=`
# line (a caller's calls along one arc) summed by the function called, with callgrind's name
# compression ("fn=(id) name", then "(id)") undone, its recursion suffixes ("'2") and symbol
# versions ("@@...") dropped.
# Prints "<swift_retain calls> <swift_release calls>" on its first line, then every runtime entry
# point of retaining and releasing that was called, with its calls.
arc_calls() { # callgrind output file
    python3 - "$1" <<'PY'
import re
import signal
import sys
from collections import Counter

# Its callers may read only the first line (`| head -1`): stop quietly when they close the pipe.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)

names, calls, callee = {}, Counter(), None
pattern = re.compile(r"^(c?fn)=(?:\((\d+)\))? ?(.*)$")
for line in open(sys.argv[1], errors="replace"):
    if line.startswith(("fn=", "cfn=")):
        kind, ident, name = pattern.match(line.rstrip("\n")).groups()
        if ident is not None:
            if name:
                names[ident] = name
            else:
                name = names.get(ident, "?")
        if kind == "cfn":
            callee = re.sub(r"(@@?[\w.]+)?('\d+)?$", "", name)
    elif line.startswith("calls=") and callee is not None:
        calls[callee] += int(line[6:].split()[0])
        callee = None
print(calls["swift_retain"], calls["swift_release"])
for name, count in sorted(calls.items(), key=lambda item: -item[1]):
    if re.match(r"swift_\w*(Retain|Release|retain|release)", name):
        print(f"{name} {count}")
PY
}
# The first 120 lines of a callgrind output file's functions by inclusive cost, demangled.
top_functions() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | sed -n 1,120p | swift demangle --simplified
}
# The total Ir of a callgrind output file (all threads).
ir_total() { sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$1"; }

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
echo "| depth | round | GETs | Ir (window, all threads) | Ir per GET | swift_retain per GET | swift_release per GET |"
echo "|---|---|---|---|---|---|---|"
for depth in $DEPTHS; do
    for round in $(seq "$ROUNDS"); do
        callgrind_control -z "$agent_pid" >/dev/null
        connections=1 inflight=$depth
        if [[ $depth == *x* ]]; then connections=${depth%x*} inflight=${depth#*x}; fi
        run=$("$LOADGEN" --unix "$work/agent.sock" --requests "$REQUESTS" --keys "$KEYS" \
            --connections "$connections" --depth "$inflight" --json)
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
        total=$(ir_total "$file")
        per=$(awk -v t="$total" -v n="$REQUESTS" 'BEGIN {printf "%.0f", t / n}')
        arc=$(arc_calls "$file")
        read -r retains releases <<<"$(head -1 <<<"$arc")"
        retains_per=$(awk -v c="$retains" -v n="$REQUESTS" 'BEGIN {printf "%.2f", c / n}')
        releases_per=$(awk -v c="$releases" -v n="$REQUESTS" 'BEGIN {printf "%.2f", c / n}')
        echo "| $depth | $round | $REQUESTS | $total | $per | $retains_per | $releases_per |"
        profile="$OUT/depth-$depth-round-$round.txt"
        {
            echo "# fleet-tokend under callgrind: $REQUESTS cached GETs, depth $depth, $KEYS keys, round $round"
            echo "# agent: $AGENT; window total Ir $total, $per per GET"
            echo "# calls of the runtime's retains and releases in the window (callgrind's call counts):"
            tail -n +2 <<<"$arc" | sed 's/^/#   /'
            echo "# top functions by inclusive cost (callgrind_annotate --inclusive=yes), demangled"
            top_functions "$file"
        } >"$profile"
        [ "$KEEP_RAW" = 0 ] || cp "$file" "$OUT/depth-$depth-round-$round.callgrind.out"
    done
done

# A worker's read of a cached token from the agent's segment: whole runs of each reader under
# callgrind at the two counts, against the agent above (its keys are cached, its segment mapped by
# the readers themselves). The rows agree from round to round as the windows do.
counted_reads() { # reader (client or c), reads, callgrind output file
    local command=("$work/shm-reads" "$work/agent.sock" vehicle bench- "$CLIENT_KEYS" "$2")
    [ "$1" = c ] || command=("$work/token-bench" shm-reads --socket "$work/agent.sock" --reads "$2" --keys "$CLIENT_KEYS")
    if ! env "${hashing[@]}" LD_PRELOAD="$work/sigsuspend.so" valgrind --tool=callgrind --callgrind-out-file="$3" \
        "${command[@]}" >"$3.json" 2>"$3.log"; then
        echo "the $1 reader failed at $2 reads:" >&2
        cat "$3.json" "$3.log" >&2
        exit 1
    fi
    local answered
    answered=$(field "$([ "$1" = c ] && echo hits || echo shared_memory_reads)" "$(<"$3.json")")
    if [ "$answered" != "$2" ]; then
        echo "the $1 reader read $answered of $2 from shared memory: $(<"$3.json")" >&2
        exit 1
    fi
}
if [ -n "$CLIENT_READS" ]; then
    echo
    echo "| reader | round | reads | Ir (whole run) | Ir per read | swift_retain per read | swift_release per read |"
    echo "|---|---|---|---|---|---|---|"
    for round in $(seq "$ROUNDS"); do
        for reader in client c; do
            low="$work/reads-$reader-$round-$reads_low.out"
            high="$work/reads-$reader-$round-$reads_high.out"
            counted_reads "$reader" "$reads_low" "$low"
            counted_reads "$reader" "$reads_high" "$high"
            span=$((reads_high - reads_low))
            ir_low=$(ir_total "$low")
            ir_high=$(ir_total "$high")
            read -r retains_low releases_low <<<"$(arc_calls "$low" | head -1)"
            read -r retains_high releases_high <<<"$(arc_calls "$high" | head -1)"
            per=$(awk -v h="$ir_high" -v l="$ir_low" -v n="$span" 'BEGIN {printf "%.1f", (h - l) / n}')
            retains_per=$(awk -v h="$retains_high" -v l="$retains_low" -v n="$span" 'BEGIN {printf "%.2f", (h - l) / n}')
            releases_per=$(awk -v h="$releases_high" -v l="$releases_low" -v n="$span" 'BEGIN {printf "%.2f", (h - l) / n}')
            label="FleetTokenClient (token-bench shm-reads)"
            [ "$reader" = client ] || label="C reader (libfleet-tokend-reader)"
            echo "| $label | $round | $reads_low, $reads_high | $ir_low, $ir_high | $per | $retains_per | $releases_per |"
            if [ "$round" = 1 ]; then
                {
                    echo "# $label under callgrind: $reads_high reads of $CLIENT_KEYS cached tokens, the whole run"
                    echo "# $per Ir per read ((Ir($reads_high) - Ir($reads_low)) / $span)"
                    echo "# top functions by inclusive cost (callgrind_annotate --inclusive=yes), demangled"
                    top_functions "$high"
                } >"$OUT/reads-$reader.txt"
                [ "$KEEP_RAW" = 0 ] || cp "$high" "$OUT/reads-$reader.callgrind.out"
            fi
        done
    done
fi
echo "profiles: $OUT/depth-*-round-*.txt${CLIENT_READS:+, $OUT/reads-*.txt}" >&2
