#!/usr/bin/env bash
# The headline figures of docs/BENCHMARKS.md, measured in one sitting on this commit and printed as
# the doc's table (markdown on standard output; progress on standard error), so a later run's
# output replaces the table verbatim. Not part of `swift test` or CI.
#   bash Benchmarks/report.sh                         # every row (about 16 min on 2 cores, built)
#   bash Benchmarks/report.sh --only memory           # some groups: --only a,b or --only a --only b
# Groups (in the table's order): shm, socket, instructions, allocations, client, memory, stall,
# startup, cachefile, keyless, federation, access.
# Environment (defaults in brackets), to trade time for noise while iterating:
#   SOCKET_DURATION [10]  SOCKET_WARMUP [2]  SOCKET_REPEATS [3]   compare.sh's runs (alternated;
#                                                   epoll-floor, one loop, with them at 64x1, 1x32)
#   SHM_ITERATIONS [400000]  CLIENT_ITERATIONS [20000]            token-bench --iterations
#   SHM_REPEATS [3]   token-bench runs of the shared-memory rows (the client, then the C reader)
#   CALLGRIND_REQUESTS [20000]  CALLGRIND_ROUNDS [2]              callgrind.sh's windows
#   CALLGRIND_CLIENT_READS ["20000 220000"]                       callgrind.sh's shared-memory reads
#   MEMORY_KEYS [100000]  READERS [50]                            agent-memory.sh, shm-memory.sh
#   STARTUP_RUNS [20]  HANDOVER_TOKENS [100000]                   startup.sh
#   KEYLESS_IDS [2000]  IAM_LATENCY_MS [50]  KEYLESS_BUDGET [1200]  keyless.py (and access.py's IAM)
#   METADATA_LATENCY_MS [2-5]  ACCESS_PROCESSES [8]  ACCESS_SECONDS [3]  access.py
# Builds the release agent (.build-bench-release) and the Benchmarks package (release) once, then
# runs the existing programs and scripts (token-bench, compare.sh with load-gen and epoll-floor,
# callgrind.sh (with token-bench shm-reads and Benchmarks/shm-reads.c),
# per-get.sh, the AgentHotPath benchmark, agent-memory.sh, shm-memory.sh, startup.sh, cachefile.py,
# keyless.py, federation.py, access.py) against that one agent.
# Their own outputs are kept in Benchmarks/.report/. Rows: docs/BENCHMARKS.md; method: docs/BENCHMARKS-METHOD.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-tools.sh

all_groups="shm socket instructions allocations client memory stall startup cachefile keyless federation access"
groups=""
while [ $# -gt 0 ]; do
    case "$1" in
        --only)
            [ $# -ge 2 ] || { echo "--only needs a group: $all_groups" >&2; exit 64; }
            for group in ${2//,/ }; do
                case " $all_groups " in
                    *" $group "*) groups+="$group " ;;
                    *) echo "unknown group $group (groups: $all_groups)" >&2; exit 64 ;;
                esac
            done
            shift 2
            ;;
        -h | --help)
            sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
groups=${groups:-$all_groups}
wants() { case " $groups " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# The knobs and their defaults; any set otherwise is named in the table's header line.
knobs=""
knob() { # name, default
    local value=${!1:-$2}
    printf -v "$1" '%s' "$value"
    [ "$value" = "$2" ] || case "$value" in
        *" "*) knobs+="$1=\"$value\" " ;;
        *) knobs+="$1=$value " ;;
    esac
}
knob SOCKET_DURATION 10
knob SOCKET_WARMUP 2
knob SOCKET_REPEATS 3
knob SHM_ITERATIONS 400000
knob SHM_REPEATS 3
knob CLIENT_ITERATIONS 20000
knob CALLGRIND_REQUESTS 20000
knob CALLGRIND_ROUNDS 2
knob CALLGRIND_CLIENT_READS "20000 220000"
knob MEMORY_KEYS 100000
knob READERS 50
knob STARTUP_RUNS 20
knob HANDOVER_TOKENS 100000
knob KEYLESS_IDS 2000
knob IAM_LATENCY_MS 50
knob KEYLESS_BUDGET 1200
knob METADATA_LATENCY_MS 2-5
knob ACCESS_PROCESSES 8
knob ACCESS_SECONDS 3

began=$(date +%s)
# What is measured is the commit's code (documents aside), as it stands when the run starts.
commit=$(git rev-parse --short HEAD)
dirty=""
[ -z "$(git status --porcelain --untracked-files=no -- . ':!docs' ':!*.md')" ] || dirty=" with uncommitted changes"
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
load_at_start=$(cut -d' ' -f1 /proc/loadavg)
out=Benchmarks/.report
rm -rf "$out"
mkdir -p "$out"
step() { echo "== $* ($(date -u '+%H:%M:%S'), load $(cut -d' ' -f1 /proc/loadavg))" >&2; }

# Before the long builds: a missing Redis that cannot be installed stops the run now.
if wants socket; then source Benchmarks/ensure-redis.sh; fi

step "building (release): the agent, then the Benchmarks package"
swift build -c release --product fleet-tokend --scratch-path .build-bench-release >&2
if wants keyless || wants federation || wants access; then
    swift build -c release --product fake-google --scratch-path .build-bench-release >&2
fi
swift build -c release --package-path Benchmarks >&2
export AGENT_BINARY=.build-bench-release/release/fleet-tokend
TOKENBENCH=Benchmarks/.build/release/token-bench
built=$(date +%s)

if wants shm; then
    step "shared-memory reads (token-bench, $SHM_ITERATIONS iterations, $SHM_REPEATS runs)"
    # Each run times the client's read, then the C reader's (Benchmarks/shm-reads.c over
    # libfleet-tokend-reader) of the same keys from the same agent, each with its timer floor.
    cc -O2 -std=c11 -I Sources/CTokenSegment/include -I libfleet-tokend-reader -o "$out/shm-reads" \
        Benchmarks/shm-reads.c libfleet-tokend-reader/fleet_tokend_reader.c
    for run in $(seq "$SHM_REPEATS"); do
        "$TOKENBENCH" --agent "$AGENT_BINARY" --iterations "$SHM_ITERATIONS" \
            --only "client.token, shared memory, 64 ready keys" --only "timer floor" --only "C reader" \
            --c-reader "$out/shm-reads" --json "$out/shm-$run.json" >"$out/shm-$run.txt" 2>&1
    done
fi
if wants socket; then
    step "socket GET against Redis and epoll-floor (compare.sh: 3 loads, $SOCKET_REPEATS runs a side, alternated)"
    # The floor (a bare epoll loop on one thread, answering from a fixed table) runs between the
    # agent and Redis at the two loads where CPU per GET shows: each ratio with its ceiling.
    KEYSETS=64 LOADS="1x1 64x1 1x32" REPEATS="$SOCKET_REPEATS" DURATION="$SOCKET_DURATION" \
        WARMUP="$SOCKET_WARMUP" FLOOR_LOOPS=1 FLOOR_LOADS="64x1 1x32" CLIENT_ROWS=0 \
        JSON_OUT="$out/socket.jsonl" bash Benchmarks/compare.sh >"$out/socket.txt"
    redis-server --version >"$out/redis-version.txt"
fi
if wants instructions; then
    step "instructions and retains per GET, instructions per shared-memory read (callgrind.sh)"
    REQUESTS="$CALLGRIND_REQUESTS" ROUNDS="$CALLGRIND_ROUNDS" DEPTHS="1 32 64x1" KEYS=64 OUT="$out/callgrind" \
        CLIENT_READS="$CALLGRIND_CLIENT_READS" CLIENT_KEYS=64 bash Benchmarks/callgrind.sh >"$out/instructions.txt"
    step "CPU time and system calls per GET (per-get.sh)"
    LOADS="64x1 1x32" bash Benchmarks/per-get.sh >"$out/per-get.txt"
fi
if wants allocations; then
    step "allocations per GET (AgentHotPath)"
    swift package --package-path Benchmarks benchmark --target AgentHotPath --filter 'agent .*' \
        --metric mallocCountTotal --scale --format markdown --no-progress >"$out/allocations.txt" 2>&1 \
        || { cat "$out/allocations.txt" >&2; exit 1; }
fi
if wants client; then
    step "the client's call and the HTTP fetch (token-bench, $CLIENT_ITERATIONS iterations)"
    "$TOKENBENCH" --agent "$AGENT_BINARY" --iterations "$CLIENT_ITERATIONS" \
        --only "client.token via agent, memo off" --only "client.token, memo on" --only "HTTP GET, URLSession" \
        --only "timer floor" \
        --json "$out/client.json" >"$out/client.txt" 2>&1
fi
if wants memory; then
    step "agent memory at $MEMORY_KEYS tokens (agent-memory.sh)"
    KEYS="$MEMORY_KEYS" MODES=on AGENTS="this=$AGENT_BINARY" bash Benchmarks/agent-memory.sh >"$out/memory.txt"
    step "$READERS readers of $MEMORY_KEYS tokens (shm-memory.sh)"
    KEYS="$MEMORY_KEYS" READERS="$READERS" bash Benchmarks/shm-memory.sh >"$out/readers.txt"
fi
if wants stall; then
    step "p99.9 at 1,000 and 100,000 keys, and while segments rotate (stall.sh)"
    KEYS="$MEMORY_KEYS" bash Benchmarks/stall.sh >"$out/stall.txt"
fi
if wants startup; then
    step "start to READY and the hand-over (startup.sh, $STARTUP_RUNS starts a row)"
    RUNS="$STARTUP_RUNS" HANDOVER_TOKENS="$HANDOVER_TOKENS" \
        bash Benchmarks/startup.sh --json "$(realpath "$out")/startup.json" >"$out/startup.txt"
fi
if wants cachefile; then
    step "the cache file: replacement, crash and the write's cost ($HANDOVER_TOKENS tokens; cache-file.sh)"
    TOKENS="$HANDOVER_TOKENS" AGENT_BINARY="$AGENT_BINARY" \
        bash Benchmarks/cache-file.sh --json "$(realpath "$out")/cachefile.json" >"$out/cachefile.txt"
fi
if wants keyless; then
    step "key-less signing through fake-google ($KEYLESS_IDS ids, IAM latency $IAM_LATENCY_MS ms; keyless.py)"
    python3 Benchmarks/keyless.py --agent "$AGENT_BINARY" --fake .build-bench-release/release/fake-google \
        --ids "$KEYLESS_IDS" --connections 64 --latency-ms "$IAM_LATENCY_MS" --budgets "60000,$KEYLESS_BUDGET" \
        >"$out/keyless.jsonl"
fi
if wants federation; then
    step "key-less fills through federation ($KEYLESS_IDS ids over 4 kinds, IAM latency $IAM_LATENCY_MS ms; federation.py)"
    python3 Benchmarks/federation.py --agent "$AGENT_BINARY" --fake .build-bench-release/release/fake-google \
        --ids "$KEYLESS_IDS" --kinds 4 --connections 64 --latency-ms "$IAM_LATENCY_MS" >"$out/federation.json"
fi
if wants access; then
    step "access-token reads: shared memory, the metadata endpoint, a metadata server at $METADATA_LATENCY_MS ms (access.py)"
    python3 Benchmarks/access.py --agent "$AGENT_BINARY" --fake .build-bench-release/release/fake-google \
        --token-bench "$TOKENBENCH" --iam-latency-ms "$IAM_LATENCY_MS" --metadata-latency-ms "$METADATA_LATENCY_MS" \
        --processes "$ACCESS_PROCESSES" --seconds "$ACCESS_SECONDS" --json "$out/access.json" >"$out/access.txt"
fi
ended=$(date +%s)

# The machine and the run, in the header line.
memory_gib=$(awk '/^MemTotal:/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
os=$(. /etc/os-release && echo "$PRETTY_NAME")
swift_version=$(swift --version 2>/dev/null | head -1 | sed 's/.*Swift version \([^ ]*\).*/\1/')
step "done"

# The table, from the programs' outputs in $out.
export OUT=$out GROUPS_RUN=$groups ALL_GROUPS=$all_groups BEGAN=$began BUILT=$built ENDED=$ended COMMIT=$commit DIRTY=$dirty KNOBS=$knobs STARTED_AT=$started_at \
    CORES=$(nproc) MEMORY_GIB=$memory_gib OS=$os KERNEL=$(uname -r) SWIFT_VERSION=$swift_version \
    LOAD_AT_START=$load_at_start MEMORY_KEYS READERS HANDOVER_TOKENS SHM_REPEATS MAX_CONCURRENT_FETCHES=16
python3 - <<'PY'
import json, os, re
from statistics import median

env = os.environ
out = env["OUT"]
groups = env["GROUPS_RUN"].split()
began, built, ended = int(env["BEGAN"]), int(env["BUILT"]), int(env["ENDED"])
memory_keys, readers, handover_tokens = int(env["MEMORY_KEYS"]), int(env["READERS"]), int(env["HANDOVER_TOKENS"])
shm_repeats = int(env["SHM_REPEATS"])
minutes = lambda seconds: f"{seconds / 60:.0f} min"
run_note = minutes(ended - built) + (f" (and {minutes(built - began)} of builds)" if built - began >= 60 else "")
subset = "" if set(groups) == set(env["ALL_GROUPS"].split()) else f" --only {','.join(groups)}"
redis = ""
if os.path.exists(f"{out}/redis-version.txt"):
    match = re.search(r"v=([0-9.]+)", open(f"{out}/redis-version.txt").read())
    redis = f", Redis {match.group(1)}" if match else ""
print(
    f"Commit `{env['COMMIT']}`{env['DIRTY']}, {env['STARTED_AT']}; {env['CORES']} cores, {env['MEMORY_GIB']} GiB, {env['OS']}, "
    f"Linux {env['KERNEL']}, Swift {env['SWIFT_VERSION']}{redis}; load average {env['LOAD_AT_START']} at the start. "
    f"`{env['KNOBS']}bash Benchmarks/report.sh{subset}`: {run_note}."
)
print()
print("| row | figure | compared with |")
print("|---|---|---|")


def n(value, digits=0):
    return f"{value:,.{digits}f}"


def lat(value):  # load-gen's latencies, µs with one decimal
    return f"{value:.1f}" if value < 1000 else n(value)


def ms(value):
    return f"{value:.1f}" if value < 1000 else n(value)


def us(value):
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else n(value)


def rows_of(name):
    path = f"{out}/{name}.json"
    return json.load(open(path)) if os.path.exists(path) else []


def find(rows, name, concurrency):
    for row in rows:
        if row["name"] == name and row["concurrency"] == concurrency:
            return row
    raise SystemExit(f"report.sh: no row '{name}' at concurrency {concurrency}")


socket = {}
if os.path.exists(f"{out}/socket.jsonl"):
    for line in open(f"{out}/socket.jsonl"):
        cell = json.loads(line)
        socket[(cell["connections"], cell["depth"])] = cell

if "shm" in groups:
    runs = [rows_of(f"shm-{run}") for run in range(1, shm_repeats + 1)]

    def median_of(name, key, concurrency=1):
        values = sorted(find(rows, name, concurrency)[key] for rows in runs)
        return values[len(values) // 2], ", ".join(us(value) for value in values)

    def read_row(label, name, floor_name):
        p50, p50s = median_of(name, "p50_us")
        p99, p99s = median_of(name, "p99_us")
        floor, floors = median_of(floor_name, "p50_us")
        print(
            f"| {label} | p50 {us(p50)} µs, p99 {us(p99)} µs (runs: p50 {p50s}; p99 {p99s}) "
            f"| timer floor {us(floor)} µs (included; runs {floors}); net p50 {(p50 - floor) * 1000:.0f} ns, "
            f"p99 {(p99 - floor) * 1000:.0f} ns |"
        )

    read_row(
        "shared-memory read, one task", "client.token, shared memory, 64 ready keys", "timer floor (empty indexed call)"
    )
    read_row(
        "the C reader's read (libfleet-tokend-reader), the same keys",
        "C reader, shared memory, 64 ready keys",
        "timer floor (empty C call)",
    )
    many = find(runs[len(runs) // 2], "client.token, shared memory, 64 ready keys", 32)
    against = "–"
    if (64, 1) in socket:
        redis_rate = socket[(64, 1)]["redis"]["req_per_s"]
        against = f"Redis GET at 64 x 1: {n(redis_rate)}/s; {many['ops_per_s'] / redis_rate:.1f}x"
    print(f"| shared-memory reads, 32 tasks | {n(many['ops_per_s'])} tokens/s | {against} |")

if "socket" in groups:
    for connections, depth in [(1, 1), (64, 1), (1, 32)]:
        cell = socket[(connections, depth)]
        agent, redis_run = cell["agent"], cell["redis"]
        print(
            f"| socket GET, {connections} x {depth} | {n(agent['req_per_s'])} GET/s, p50 {lat(agent['p50_us'])} µs, "
            f"p99 {lat(agent['p99_us'])} µs | Redis {n(redis_run['req_per_s'])} GET/s, p50 {lat(redis_run['p50_us'])} "
            f"µs, p99 {lat(redis_run['p99_us'])} µs: **{agent['req_per_s'] / redis_run['req_per_s']:.2f}x** |"
        )
    # The floor measured in the same runs: each run's rate beside it, for the noise.
    for connections, depth in [(64, 1), (1, 32)]:
        cell = socket[(connections, depth)]
        floor_run, agent, redis_run = cell["floor"], cell["agent"], cell["redis"]
        runs = ", ".join(n(rate / 1000) + "k" for rate in cell["floor_runs"])
        print(
            f"| socket floor (epoll-floor, one loop), {connections} x {depth} | {n(floor_run['req_per_s'])} GET/s, "
            f"p50 {lat(floor_run['p50_us'])} µs, p99 {lat(floor_run['p99_us'])} µs (runs {runs}) "
            f"| agent **{agent['req_per_s'] / floor_run['req_per_s']:.2f}x** of it, "
            f"Redis {redis_run['req_per_s'] / floor_run['req_per_s']:.2f}x |"
        )

if "instructions" in groups:
    # callgrind.sh's tables: the GET windows (depth, or CxD for C connections, round, GETs, Ir, Ir
    # per GET, swift_retain and swift_release per GET), then the shared-memory reads (reader,
    # round, reads, Ir, Ir per read, swift_retain and swift_release per read).
    per, retains, releases, reads = {}, {}, {}, {}
    for line in open(f"{out}/instructions.txt"):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].replace("x", "").isdigit():
            depth = int(cells[0]) if cells[0].isdigit() else cells[0]
            per.setdefault(depth, []).append(int(cells[4]))
            retains.setdefault(depth, []).append(float(cells[5]))
            releases.setdefault(depth, []).append(float(cells[6]))
        elif len(cells) == 7 and cells[1].isdigit():
            reads.setdefault(cells[0].split(" (")[0], []).append([float(cell) for cell in cells[4:]])
    def spread(values):
        return (max(values) - min(values)) / min(values) * 100 if min(values) > 0 else 0.0
    def mean(values):
        return sum(values) / len(values)
    windows = len(per[1])
    agreement = f"{windows} windows a load, within {max(spread(values) for values in per.values()):.2f}%" if windows > 1 else "–"
    print(
        f"| instructions per socket GET | {n(mean(per[1]))} at depth 1, "
        f"{n(mean(per[32]))} at depth 32, {n(mean(per['64x1']))} at 64 x 1 | {agreement} |"
    )
    print(
        f"| swift_retain and swift_release calls per socket GET | depth 1: {mean(retains[1]):.2f} and "
        f"{mean(releases[1]):.2f}; depth 32: {mean(retains[32]):.2f} and {mean(releases[32]):.2f}; "
        f"64 x 1: {mean(retains['64x1']):.2f} and {mean(releases['64x1']):.2f} "
        f"| callgrind's call counts in the same windows |"
    )
    if reads:
        client, c_reader = reads["FleetTokenClient"], reads["C reader"]
        client_ir, c_ir = [row[0] for row in client], [row[0] for row in c_reader]
        rounds = len(client_ir)
        agreement = f"; {rounds} rounds, within {max(spread(client_ir), spread(c_ir)):.2f}%" if rounds > 1 else ""
        print(
            f"| instructions per shared-memory read | FleetTokenClient: {n(mean(client_ir))} "
            f"(swift_retain {mean([row[1] for row in client]):.2f}, swift_release {mean([row[2] for row in client]):.2f}) "
            f"| the C reader (libfleet-tokend-reader): {n(mean(c_ir))}, "
            f"**{mean(client_ir) / mean(c_ir):.2f}x**{agreement} |"
        )
    costs = {}
    for line in open(f"{out}/per-get.txt"):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 8 and "x" in cells[0] and cells[1].isdigit():
            costs[cells[0]] = cells
    print(
        "| agent CPU and system calls per socket GET | "
        + "; ".join(f"{load.replace('x', ' x ')}: {c[2]} µs, {c[3]} calls" for load, c in costs.items())
        + " | user + system time from /proc; calls by strace -c (read, write, epoll_wait: "
        + "; ".join(f"{c[4]}, {c[5]}, {c[6]}" for c in costs.values())
        + ") |"
    )

if "allocations" in groups:
    # The markdown tables of ordo-one/benchmark: a "### <benchmark>" heading, then a "Malloc (total)"
    # row whose cells are the percentiles of mallocs per iteration (--scale) over the samples.
    text = open(f"{out}/allocations.txt").read()
    counts = {}
    current = None
    for line in text.splitlines():
        heading = re.search(r"(agent GET(?: x32 pipelined)?)\b", line)
        if heading and "Malloc" not in line:
            current = heading.group(1)
        if current and line.startswith("| Malloc (total)"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            # p0 ... p100, then the number of samples.
            counts[current] = [int(cell.replace(",", "")) for cell in cells[1:-1]]
    if set(counts) != {"agent GET", "agent GET x32 pipelined"}:
        raise SystemExit(f"report.sh: no malloc counts in {out}/allocations.txt")
    single, burst = counts["agent GET"], counts["agent GET x32 pipelined"]
    fmt = lambda value: f"{value:g}"
    print(
        f"| allocations per socket GET | {fmt(max(single))} (one GET a read), "
        f"{fmt(max(burst) / 32)} (32 in one read) | every sample alike: {'yes' if len(set(single)) == 1 and len(set(burst)) == 1 else 'no'} |"
    )

if "client" in groups:
    rows = rows_of("client")
    memo_off = find(rows, "client.token via agent, memo off", 1)
    memo_on = find(rows, "client.token, memo on", 1)
    http = find(rows, "HTTP GET, URLSession", 1)
    print(
        f"| client call, memo off | p50 {us(memo_off['p50_us'])} µs, p99 {us(memo_off['p99_us'])} µs "
        f"| the HTTP fetch below: {http['p50_us'] / memo_off['p50_us']:.1f}x slower (p50) |"
    )
    floor = find(rows, "timer floor (empty call)", 1)
    print(
        f"| client call, memo on | p50 {us(memo_on['p50_us'])} µs, p99 {us(memo_on['p99_us'])} µs "
        f"| timer floor {us(floor['p50_us'])} µs (included) |"
    )
    print(
        f"| HTTP fetch (URLSession, local provider) | p50 {us(http['p50_us'])} µs, p99 {us(http['p99_us'])} µs | – |"
    )

if "memory" in groups:
    memory = None
    for line in open(f"{out}/memory.txt"):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[1] == "on":
            memory = cells
    if memory is None:
        raise SystemExit(f"report.sh: no memory row in {out}/memory.txt")
    vmrss, anon, shmem, file_backed, hwm, segments = (float(cell) for cell in memory[2:8])
    print(
        f"| agent memory, {n(memory_keys)} tokens | RssAnon {anon:.1f} + RssShmem {shmem:.1f} = "
        f"**{anon + shmem:.1f} MiB** | segments {segments:.1f} MiB; file-backed pages {file_backed:.1f} MiB left out |"
    )
    print(
        f"| agent memory, peak during growth | **{hwm - file_backed:.1f} MiB** (VmHWM {hwm:.1f} less RssFile) | – |"
    )
    readers_text = open(f"{out}/readers.txt").read()
    one = re.search(r"^\| one reader, average \| [0-9.]+ \| ([0-9.]+) \| ([0-9.]+) \|", readers_text, re.M)
    everyone = re.search(r"^\| all processes, summed \| [0-9.]+ \| ([0-9.]+) \| ([0-9.]+) \|", readers_text, re.M)
    hits = re.search(r"Reads that hit: ([0-9]+) of ([0-9]+)", readers_text)
    if not (one and everyone and hits):
        raise SystemExit(f"report.sh: no reader figures in {out}/readers.txt")
    print(
        f"| {readers} readers of {n(memory_keys)} tokens | PSS {one.group(1)} MiB a reader, "
        f"{float(one.group(1)) - float(one.group(2)):.1f} MiB of it its own | segment pages counted once: "
        f"Pss_Shmem {everyone.group(2)} MiB over all {readers + 1} processes; {n(int(hits.group(1)))} of "
        f"{n(int(hits.group(2)))} reads hit |"
    )


if "stall" in groups:
    medians = {}
    for line in open(f"{out}/stall.txt").read().split("Medians by p99.9")[1].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].replace(".", "").isdigit():
            medians[cells[0]] = cells
    small, large = medians["1000 keys"], medians[f"{memory_keys} keys"]
    rotating = next(cells for label, cells in medians.items() if "rotating" in label)
    print(
        f"| socket GET 64 x 1, p99.9 by key count | {n(memory_keys)} keys: {large[3]} µs; 1,000 keys: {small[3]} µs "
        f"| **{float(large[3]) / float(small[3]):.2f}x** (max {large[4]} and {small[4]} µs) |"
    )
    print(
        f"| socket GET 64 x 1, p99.9 while segments rotate every 2 s | {rotating[3]} µs "
        f"({n(memory_keys)} keys; max {rotating[4]} µs) | without rotation: {large[3]} µs, "
        f"**{float(rotating[3]) / float(large[3]):.2f}x** |"
    )
    steady = next((cells for label, cells in medians.items() if label.endswith(" inserted")), None)
    growing = next((cells for label, cells in medians.items() if "across a growth" in label), None)
    if steady and growing:
        print(
            f"| socket GET 64 x 1, p99.9 while new keys force a growth | {growing[3]} µs ({growing[0]}; max "
            f"{growing[4]} µs) | the same inserts under the growth point ({steady[0]}): {steady[3]} µs, "
            f"**{float(growing[3]) / float(steady[3]):.2f}x** |"
        )
if "startup" in groups:
    startup = json.load(open(f"{out}/startup.json"))
    plain = startup["HTTP provider, empty cache"]["ready_ms"]
    demo = startup["demo issuer, empty cache"]["ready_ms"]
    print(
        f"| start to READY, empty cache | median {ms(median(plain))} ms (max {ms(max(plain))}) "
        f"| demo issuer: median {ms(median(demo))} ms (max {ms(max(demo))}) |"
    )
    handover = [name for name in startup if name.endswith("-token hand-over (via sh)")]
    if handover:
        passed = startup[handover[0]]["ready_ms"]
        via_sh = startup["issuer key, empty cache (via sh)"]["ready_ms"]
        print(
            f"| hand-over of {n(handover_tokens)} tokens | **+{n(median(passed) - median(via_sh))} ms** to READY "
            f"| {ms(median(passed))} ms against {ms(median(via_sh))} ms without; snapshot "
            f"{startup['snapshot_bytes'] / 1048576:.1f} MiB |"
        )

if "cachefile" in groups:
    cache = json.load(open(f"{out}/cachefile.json"))
    adopted = [name for name in cache if name.endswith("-token cache file")][0]
    with_file, without = cache[adopted]["ready_ms"], cache["no cache file"]["ready_ms"]
    print(
        f"| replacement with a cache file of {n(handover_tokens)} tokens | READY median {ms(median(with_file))} ms "
        f"(max {ms(max(with_file))}), then fetches for all of them: {max(cache['fetches_after_replacement'])} "
        f"| without the file: median {ms(median(without))} ms; file {cache['cache_bytes'] / 1048576:.1f} MiB |"
    )
    crash = cache["crash"]
    print(
        f"| SIGKILL after a periodic write (every 1 s) | adopted {n(crash['adopted'])}, fetched "
        f"**{n(crash['fetched'])}** | {n(crash['late'])} keys came after the last write |"
    )
    writing = [run["p999_us"] for run in cache["write_cost"]["writing every 1 s"]]
    quiet = [run["p999_us"] for run in cache["write_cost"]["writing only at stop"]]
    write_ms = median(run["write_ms"] for run in cache["write_cost"]["writing every 1 s"])
    print(
        f"| socket GET 64 x 1, p99.9 while the cache file is written every 1 s | {lat(median(writing))} µs "
        f"({n(handover_tokens)} keys; a write {n(write_ms)} ms) | written only at stop: {lat(median(quiet))} µs, "
        f"**{median(writing) / median(quiet):.2f}x** |"
    )

if "keyless" in groups:
    runs = [json.loads(line) for line in open(f"{out}/keyless.jsonl")]
    free, budgeted = runs[0], runs[1]
    bound = int(env["MAX_CONCURRENT_FETCHES"]) / (free["iam_latency_ms"] / 1000)
    print(
        f"| key-less fills, {free['iam_latency_ms']} ms IAM | {n(free['fills_per_second'])} fills/s "
        f"({n(free['ids'])} new ids, {free['connections']} connections; {free['signatures']} signJwt) "
        f"| 16 calls in flight / {free['iam_latency_ms']} ms = {n(bound)}/s: {free['fills_per_second'] / bound:.2f}x |"
    )
    per_minute = budgeted["budget_per_minute"]
    burst = max(1, per_minute // 6)
    held = all(budgeted[f"most_in_{w}s"] <= burst + budgeted[f"rate_x_{w}s"] for w in (1, 10)) and budgeted["most_in_60s"] <= per_minute
    replies = ", ".join(f"{count} {code}" for code, count in sorted(budgeted["replies"].items()))
    print(
        f"| key-less fills, budget {n(per_minute)}/min | {n(budgeted['fills_per_second'])} fills/s "
        f"({replies}); at the fake: most {budgeted['most_in_1s']} in 1 s, {budgeted['most_in_10s']} in 10 s, "
        f"{budgeted['most_in_60s']} in 60 s | burst {burst} + {per_minute / 60:g}/s: "
        f"**{'never exceeded' if held else 'EXCEEDED'}** |"
    )

if "federation" in groups:
    fed = json.loads(open(f"{out}/federation.json").read())
    bound = fed["kinds"] * int(env["MAX_CONCURRENT_FETCHES"]) / (fed["iam_latency_ms"] / 1000)
    print(
        f"| key-less fills through federation, {fed['iam_latency_ms']} ms IAM | {n(fed['fills_per_second'])} fills/s "
        f"({n(fed['ids'])} new ids over {fed['kinds']} kinds, then the host's access token; {fed['signatures']} signJwt); "
        f"at the fake: **{fed['sts_exchanges']}** STS exchange, **{fed['impersonations']}** impersonation for the host "
        f"| {fed['kinds']} x 16 calls in flight / {fed['iam_latency_ms']} ms = {n(bound)}/s: "
        f"{fed['fills_per_second'] / bound:.2f}x; one exchange an hour whatever the kinds |"
    )

if "access" in groups:
    access = json.load(open(f"{out}/access.json"))
    single, multi, fake = access["single"], access["multi"], access["fake"]
    base, shm, kept, fresh = single["baseline"], single["shm"], single["endpoint"], single["endpoint-new"]
    reads = lambda row: f"p50 {us(row['p50_us'])} µs, p99 {us(row['p99_us'])} µs, {n(row['reads_per_s'])} reads/s"
    # Two decimals under 10 (a paced endpoint can be a fraction of the fetch), whole above.
    ratio = lambda value: f"{value:.2f}" if value < 10 else n(value)
    times = lambda row, against: f"**{ratio(row['reads_per_s'] / against['reads_per_s'])}x**"
    print(
        f"| access token fetched from a metadata server ({access['metadata_latency_ms']} ms), one process "
        f"| {reads(base)} | each worker fetching its own: the baseline of the access-token rows |"
    )
    print(f"| access-token read, shared memory, one process | {reads(shm)} | the fetch: {times(shm, base)} |")
    print(
        f"| access-token read, metadata endpoint, one process | keep-alive: {reads(kept)}; a new connection each: "
        f"{reads(fresh)} | the fetch: {times(kept, base)} kept alive, {times(fresh, base)} new |"
    )
    processes, fetching = multi["shm"]["processes"], multi["baseline"]
    during = sum(multi[path][calls] for path in ("shm", "endpoint") for calls in ("generate_access_token", "metadata_requests"))
    print(
        f"| access token, {processes} processes at once | shared memory {n(multi['shm']['reads_per_s'])} reads/s, "
        f"endpoint {n(multi['endpoint']['reads_per_s'])} reads/s; at the fake: **{fake['generate_access_token']}** "
        f"generateAccessToken in the run, {during} calls during these reads | each fetching its own: "
        f"{n(fetching['reads_per_s'])} reads/s, {n(fetching['metadata_requests'])} metadata requests at the fake; "
        f"shared memory {times(multi['shm'], fetching)}, endpoint {times(multi['endpoint'], fetching)} |"
    )
PY
