// The C reader's read of a cached token, a fixed number of times, untimed, for callgrind to count
// beside the Swift client's (`token-bench shm-reads`; Benchmarks/callgrind.sh runs both at two
// counts and divides the difference of their instructions by the difference of the counts). Over
// libfleet-tokend-reader, as Examples/shm-reader: asks the agent for the kind's segment, maps it,
// then looks the ids <prefix>0 ... <prefix>(keys-1) up in turn with the agent's default validity
// (ftr_lookup, which copies the token out under the slot's seqlock). Every read must hit.
// Built from the repository's root with one cc line:
//   cc -O2 -std=c11 -I Sources/CTokenSegment/include -I libfleet-tokend-reader -o shm-reads
//      Benchmarks/shm-reads.c libfleet-tokend-reader/fleet_tokend_reader.c
//   shm-reads SOCKET KIND PREFIX KEYS READS        (KEYS a power of two)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fleet_tokend_reader.h"

static struct ftr_segment segment = {.words = NULL, .fd = -1};
static struct ftr_result result;

int main(int argc, char **argv) {
    if (argc != 6) {
        fputs("usage: shm-reads SOCKET KIND PREFIX KEYS READS\n", stderr);
        return 64;
    }
    long keys = atol(argv[4]), reads = atol(argv[5]);
    if (keys <= 0 || (keys & (keys - 1)) != 0 || keys > 65536 || reads < 0) {
        fputs("KEYS must be a power of two up to 65536, READS not negative\n", stderr);
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
    for (long index = 0; index < reads; index++) {
        long key = index & (keys - 1);
        if (ftr_lookup(&segment, ids[key], lengths[key], -1, &result) == FTR_HIT) hits++;
    }
    printf("{\"reads\": %ld, \"hits\": %ld, \"token_bytes\": %zu}\n", reads, hits, hits ? result.token_length : 0);
    ftr_segment_close(&segment);
    close(sock);
    free(ids);
    free(lengths);
    return hits == reads ? 0 : 1;
}
