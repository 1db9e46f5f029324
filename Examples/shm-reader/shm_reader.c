// A reader of fleet-tokend's shared-memory segments in plain C, over libfleet-tokend-reader
// (libfleet-tokend-reader/, docs/SHM.md): what a Go, Python or Java worker on the same host
// would do. It asks the agent for a kind's segment over the socket, maps the descriptor
// read-only, and answers ids read from standard input, one per line:
//
//   HIT <token> <unix-expiry>     the segment holds the id's token with enough validity left
//   MISS                          it does not: ask the agent with GET
//   UNUSABLE <reason>             retired, stale heartbeat, or damaged: ask for a new segment
//
// Nothing handed over is trusted (the library's checks): the descriptor is mapped only if the file
// is sealed against writing, growing and shrinking and has the announced size, the header must be
// of layout 2 (the only one read) and name the kind asked for, and a token is printed only when
// it is printable ASCII (so it cannot hold a line break) with an expiry the agent could serve.
//
// A line "SEALCHECK" instead re-opens the descriptor read-write through /proc and reports what
// pwrite, ftruncate and a writable mmap gave (all must fail with EPERM). "STRESS" and "FOLLOW"
// are the test modes described at their functions.
//
// Built from the repository's root with one cc line (README.md here), or against the installed
// library with pkg-config:
//   cc -O2 -std=c11 -I Sources/CTokenSegment/include -I libfleet-tokend-reader -o shm-reader
//      Examples/shm-reader/shm_reader.c libfleet-tokend-reader/fleet_tokend_reader.c
//   cc -O2 -std=c11 -o shm-reader shm_reader.c $(pkg-config --cflags --libs fleet-tokend-reader)
//   shm-reader /run/fleet-tokend/tokens.sock vehicle [min-validity-s]

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fleet_tokend_reader.h"

// The mapped segment: replaced when the agent offers a new one.
static struct ftr_segment segment = {.words = NULL, .fd = -1};
// The last lookup's result (its token's room is 16 KiB: not on the stack of every caller).
static struct ftr_result result;

static uint64_t boottime_ns(void) { return ftr_boottime_ns(); }

static enum ftr_answer lookup(const char *id, double min_validity) {
    return ftr_lookup(&segment, id, strlen(id), min_validity, &result);
}

// Prints `text` with every byte that is not printable ASCII as '?': the peer's words, never a line
// or a terminal sequence of its own.
static void print_escaped(FILE *out, const char *text) {
    for (; *text; text++) fputc((unsigned char)*text >= 0x20 && (unsigned char)*text < 0x7F ? *text : '?', out);
    fputc('\n', out);
}

static void answer(const char *id, double min_validity) {
    enum ftr_answer found = lookup(id, min_validity);
    if (found == FTR_HIT) printf("HIT %s %lld\n", result.token, result.unix_expiry);
    else if (found == FTR_MISS) puts("MISS");
    else printf("UNUSABLE %s\n", result.reason);
}

static void seal_check(int fd) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int writable = open(path, O_RDWR);
    if (writable < 0) { printf("SEALCHECK open %s\n", strerror(errno)); return; }
    char byte = 'A';
    int pw = pwrite(writable, &byte, 1, 300) < 0 ? errno : 0;
    int tr = ftruncate(writable, 4096) < 0 ? errno : 0;
    void *map = mmap(NULL, segment.size, PROT_READ | PROT_WRITE, MAP_SHARED, writable, 0);
    int mp = map == MAP_FAILED ? errno : 0;
    printf("SEALCHECK pwrite=%s ftruncate=%s mmap=%s\n", pw == EPERM ? "EPERM" : "ALLOWED",
           tr == EPERM ? "EPERM" : "ALLOWED", mp == EPERM ? "EPERM" : "ALLOWED");
    close(writable);
}

static const char *socket_path;

// Asks for `kind`'s segment on `sock` and maps it in place of the one mapped. Returns 0, or prints
// why not and returns the exit status for it.
static int map_segment(int sock, const char *kind, int announce) {
    FILE *out = announce ? stdout : stderr;
    char line[256];
    enum ftr_status status = ftr_request_segment(sock, kind, &segment, line, sizeof line);
    switch (status) {
    case FTR_OK:
        if (announce) printf("SEGMENT generation=%llu size=%zu\n", (unsigned long long)segment.generation, segment.size);
        return 0;
    case FTR_NO_CONNECTION: return 69;
    case FTR_MMAP_FAILED: perror("mmap"); return 71;
    case FTR_REFUSED:
        fputs("NOSEGMENT ", out);
        print_escaped(out, line);
        return 77;
    case FTR_WRONG_KIND: fprintf(out, "NOSEGMENT segment is not of kind %s\n", kind); return 77;
    default: fprintf(out, "NOSEGMENT %s\n", ftr_status_text(status)); return 77;
    }
}

// "STRESS <seconds> <count> <prefix>": reads ids <prefix>0 .. <prefix>(count-1) at random for that
// long (or until a STOP line arrives on standard input), checking every hit: the token's last
// part must be `<id>_<n x's>_<n>` (the test provider's pad- tokens) and its Unix expiry ahead. A retired segment is replaced and the read retried;
// reads a real reader would take to the socket (a slot that kept changing) are counted apart.
static void stress(int sock, const char *kind, const char *arguments, double min_validity) {
    double seconds = 0;
    long count = 0;
    char prefix[128] = {0};
    if (sscanf(arguments, "%lf %ld %127s", &seconds, &count, prefix) != 3 || count <= 0) {
        puts("STRESS bad arguments");
        return;
    }
    unsigned long long reads = 0, hits = 0, misses = 0, bad = 0, unusable = 0, remaps = 0, lost = 0, fallbacks = 0;
    uint64_t end = boottime_ns() + (uint64_t)(seconds * 1e9);
    unsigned int seed = (unsigned int)getpid();
    char id[160], expected[200];
    while (boottime_ns() < end) {
        snprintf(id, sizeof id, "%s%ld", prefix, (long)(rand_r(&seed) % count));
        // A pause every 128 reads, so that eight readers on two cores leave the agent (and
        // whatever else runs, such as other tests) room to work.
        if (++reads % 128 == 0) {
            nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
            // A line on standard input ends the run early.
            struct pollfd input = {.fd = 0, .events = POLLIN};
            if (poll(&input, 1, 0) == 1) {
                char ignored[64];
                if (!fgets(ignored, sizeof ignored, stdin) || strncmp(ignored, "STOP", 4) == 0) break;
            }
        }
        enum ftr_answer found = lookup(id, min_validity);
        for (int again = 0; found == FTR_UNUSABLE && again < 3; again++) {
            unusable++;
            if (strcmp(result.reason, FTR_REASON_RETIRED) != 0) break;
            if (map_segment(sock, kind, 0) != 0) break;
            remaps++;
            found = lookup(id, min_validity);
        }
        if (found == FTR_MISS) { misses++; continue; }
        if (found == FTR_UNUSABLE) {
            // A slot that kept changing (the writer was descheduled mid-write) is read through the
            // socket by a real reader; a retired segment that could not be replaced is a lost read.
            if (strcmp(result.reason, FTR_REASON_RETIRED) == 0) lost++;
            else fallbacks++;
            continue;
        }
        hits++;
        const char *token = result.token;
        size_t length = result.token_length;
        const char *last = NULL;
        for (size_t i = 0; i < length; i++) if (token[i] == '.') last = token + i + 1;
        int whole = last != NULL;
        if (whole) {
            size_t tail = length - (size_t)(last - token);
            int prefix_length = snprintf(expected, sizeof expected, "%s_", id);
            whole = tail > (size_t)prefix_length && memcmp(last, expected, (size_t)prefix_length) == 0;
            if (whole) {
                const char *pad = last + prefix_length;
                size_t pad_room = tail - (size_t)prefix_length;
                size_t x = 0;
                while (x < pad_room && pad[x] == 'x') x++;
                char digits[16];
                int digits_length = snprintf(digits, sizeof digits, "_%zu", x);
                whole = pad_room == x + (size_t)digits_length && memcmp(pad + x, digits, (size_t)digits_length) == 0;
            }
        }
        if (!whole || result.unix_expiry <= (long long)time(NULL)) {
            if (bad < 3) fprintf(stderr, "bad read of %s: %.*s\n", id, (int)length, token);
            bad++;
        }
    }
    printf("STRESS reads=%llu hits=%llu misses=%llu bad=%llu unusable=%llu remaps=%llu lost=%llu fallbacks=%llu\n",
           reads, hits, misses, bad, unusable, remaps, lost, fallbacks);
}

// Connects to the agent's socket, retrying for up to 10 s (the agent restarting). -1 on failure.
static int connect_agent(void) {
    for (int attempt = 0; attempt < 200; attempt++) {
        int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        strncpy(address.sun_path, socket_path, sizeof address.sun_path - 1);
        if (connect(sock, (struct sockaddr *)&address, sizeof address) == 0) return sock;
        close(sock);
        nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
    }
    return -1;
}

// "FOLLOW <seconds> <id>": reads one id over and over for that long, as a long-lived worker
// would, through agent restarts: a retired or stale segment makes it connect again and ask for the
// new one. Prints "FOLLOWING <answer>" after its first read, and at the end the counts and the
// last answer. It ends early once 100 reads after a reconnect have hit.
static void follow(int *sock, const char *kind, const char *arguments, double min_validity) {
    double seconds = 0;
    char id[160] = {0};
    if (sscanf(arguments, "%lf %159s", &seconds, id) != 2) {
        puts("FOLLOW bad arguments");
        return;
    }
    unsigned long long reads = 0, hits = 0, misses = 0, reconnects = 0, lost = 0, hits_after_reconnect = 0;
    uint64_t end = boottime_ns() + (uint64_t)(seconds * 1e9);
    enum ftr_answer found = FTR_MISS;
    while (boottime_ns() < end) {
        reads++;
        found = lookup(id, min_validity);
        if (found == FTR_UNUSABLE) {
            // Ask again on this connection; if the agent went away, on a new one.
            int mapped = map_segment(*sock, kind, 0) == 0;
            if (!mapped) {
                close(*sock);
                *sock = connect_agent();
                mapped = *sock >= 0 && map_segment(*sock, kind, 0) == 0;
                if (mapped) reconnects++;
            }
            if (!mapped) { lost++; continue; }
            found = lookup(id, min_validity);
        }
        if (found == FTR_HIT) {
            hits++;
            if (reconnects > 0) hits_after_reconnect++;
        } else if (found == FTR_MISS) {
            misses++;
        } else {
            lost++;
        }
        if (reads == 1) {
            printf("FOLLOWING %s\n", found == FTR_HIT ? "HIT" : found == FTR_MISS ? "MISS" : "UNUSABLE");
            fflush(stdout);
        }
        if (hits_after_reconnect >= 100) break;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    printf("FOLLOW reads=%llu hits=%llu misses=%llu reconnects=%llu lost=%llu hits_after_reconnect=%llu last=%s\n",
           reads, hits, misses, reconnects, lost, hits_after_reconnect,
           found == FTR_HIT ? "HIT" : found == FTR_MISS ? "MISS" : "UNUSABLE");
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s SOCKET KIND [MIN-VALIDITY-S]\n", argv[0]); return 64; }
    if (strlen(argv[2]) > FTS_MAX_KIND_LENGTH) { fputs("a kind is at most 32 bytes\n", stderr); return 64; }
    double min_validity = argc > 3 ? atof(argv[3]) : -1;
    socket_path = argv[1];
    int sock = connect_agent();
    if (sock < 0) { perror("connect"); return 69; }
    signal(SIGPIPE, SIG_IGN);
    int status = map_segment(sock, argv[2], 1);
    if (status == 69) fputs("the agent closed the connection\n", stderr);
    fflush(stdout);
    if (status != 0) return status;
    char id[512];
    while (fgets(id, sizeof id, stdin)) {
        id[strcspn(id, "\r\n")] = 0;
        if (strcmp(id, "SEALCHECK") == 0) seal_check(segment.fd);
        else if (strncmp(id, "STRESS ", 7) == 0) stress(sock, argv[2], id + 7, min_validity);
        else if (strncmp(id, "FOLLOW ", 7) == 0) follow(&sock, argv[2], id + 7, min_validity);
        else answer(id, min_validity);
        fflush(stdout);
    }
    return 0;
}
