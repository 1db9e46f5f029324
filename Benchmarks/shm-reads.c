// The C reader's read of a cached token, a fixed number of times, untimed, for callgrind to count
// beside the Swift client's (`token-bench shm-reads`; Benchmarks/callgrind.sh runs both at two
// counts and divides the difference of their instructions by the difference of the counts). Over
// libfleet-tokend-reader, as Examples/shm-reader: asks the agent for the kind's segment, maps it,
// then looks the ids <prefix>0 ... <prefix>(keys-1) up in turn with the agent's default validity
// (ftr_lookup, which copies the token out under the slot's seqlock). Every read must hit.
// With --timed, each read is timed as token-bench times the client's (CLOCK_MONOTONIC read before
// and after it), and so is an empty call, the timer's floor: token-bench --c-reader runs it beside
// the client's row, against the same agent and keys.
// Built from the repository's root with one cc line:
//   cc -O2 -std=c11 -I Sources/CTokenSegment/include -I libfleet-tokend-reader -o shm-reads
//      Benchmarks/shm-reads.c libfleet-tokend-reader/fleet_tokend_reader.c
//   shm-reads SOCKET KIND PREFIX KEYS READS [--timed]        (KEYS a power of two)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fleet_tokend_reader.h"

static struct ftr_segment segment = {.words = NULL, .fd = -1};
static struct ftr_result result;

static inline uint64_t monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/// An empty call, kept out of line: what the timer adds to each read.
__attribute__((noinline)) static void nothing(void) { __asm__ volatile(""); }

int main(int argc, char **argv) {
    int timed = argc == 7 && strcmp(argv[6], "--timed") == 0;
    if (argc != 6 && !timed) {
        fputs("usage: shm-reads SOCKET KIND PREFIX KEYS READS [--timed]\n", stderr);
        return 64;
    }
    long keys = atol(argv[4]), reads = atol(argv[5]);
    if (keys <= 0 || (keys & (keys - 1)) != 0 || keys > 65536 || reads < 0 || (timed && reads < 100)) {
        fputs("KEYS must be a power of two up to 65536, READS not negative (timed: at least 100)\n", stderr);
        return 64;
    }
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    if (sock < 0 || connect(sock, (struct sockaddr *)&address, sizeof address) != 0) {
        perror("connect");
        return 69;
    }
    char line[256];
    enum ftr_status status = ftr_request_segment(sock, argv[2], &segment, line, sizeof line);
    if (status != FTR_OK) {
        fprintf(stderr, "no segment: %s (%s)\n", ftr_status_text(status), line);
        return 77;
    }
    // The ids, made once, as a worker holds them.
    char (*ids)[64] = calloc((size_t)keys, 64);
    size_t *lengths = calloc((size_t)keys, sizeof *lengths);
    for (long key = 0; key < keys; key++) {
        lengths[key] = (size_t)snprintf(ids[key], 64, "%s%ld", argv[3], key);
    }
    long hits = 0;
    if (!timed) {
        for (long index = 0; index < reads; index++) {
            long key = index & (keys - 1);
            if (ftr_lookup(&segment, ids[key], lengths[key], -1, &result) == FTR_HIT) hits++;
        }
        printf("{\"reads\": %ld, \"hits\": %ld, \"token_bytes\": %zu}\n", reads, hits,
               hits ? result.token_length : 0);
    } else {
        // As token-bench: a warm-up, then each read timed on its own; then the empty call.
        for (long index = 0; index < 500; index++) {
            long key = index & (keys - 1);
            ftr_lookup(&segment, ids[key], lengths[key], -1, &result);
        }
        uint64_t *reading = calloc((size_t)reads, sizeof *reading);
        uint64_t *floor = calloc((size_t)reads, sizeof *floor);
        uint64_t started = monotonic_ns();
        for (long index = 0; index < reads; index++) {
            long key = index & (keys - 1);
            uint64_t start = monotonic_ns();
            enum ftr_answer answer = ftr_lookup(&segment, ids[key], lengths[key], -1, &result);
            reading[index] = monotonic_ns() - start;
            if (answer == FTR_HIT) hits++;
        }
        uint64_t total = monotonic_ns() - started;
        for (long index = 0; index < reads; index++) {
            uint64_t start = monotonic_ns();
            nothing();
            floor[index] = monotonic_ns() - start;
        }
        qsort(reading, (size_t)reads, sizeof *reading, by_value);
        qsort(floor, (size_t)reads, sizeof *floor, by_value);
        printf("{\"reads\": %ld, \"hits\": %ld, \"token_bytes\": %zu, \"p50_ns\": %llu, \"p99_ns\": %llu, "
               "\"reads_per_s\": %.0f, \"floor_p50_ns\": %llu, \"floor_p99_ns\": %llu}\n",
               reads, hits, hits ? result.token_length : 0, (unsigned long long)reading[reads / 2],
               (unsigned long long)reading[reads * 99 / 100], reads / (total / 1e9),
               (unsigned long long)floor[reads / 2], (unsigned long long)floor[reads * 99 / 100]);
        free(reading);
        free(floor);
    }
    ftr_segment_close(&segment);
    close(sock);
    free(ids);
    free(lengths);
    return hits == reads ? 0 : 1;
}
