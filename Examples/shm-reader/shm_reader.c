// A reader of fleet-tokend's shared-memory segments in plain C: what a Go, Python or Java worker
// on the same host would do (docs/SHM.md). It asks the agent for a kind's segment over the socket,
// maps the descriptor read-only, and answers ids read from standard input, one per line:
//
//   HIT <token> <unix-expiry>     the segment holds the id's token with enough validity left
//   MISS                          it does not: ask the agent with GET
//   UNUSABLE <reason>             retired, stale heartbeat, or damaged: ask for a new segment
//
// A line "SEALCHECK" instead re-opens the descriptor read-write through /proc and reports what
// pwrite, ftruncate and a writable mmap gave (all must fail with EPERM).
//
//   cc -O2 -std=c11 -o shm-reader shm_reader.c
//   shm-reader /run/fleet-tokend/tokens.sock vehicle [min-validity-s]

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x31304D48534B5446ULL /* "FTKSHM01" */
#define LAYOUT 1
#define HEADER_SIZE 256
#define SLOT_HEADER 48
#define PROBE_CAP 4096
#define STALE_NS 3000000000ULL

enum { H_MAGIC, H_VERSION, H_GENERATION, H_FLAGS, H_HEARTBEAT, H_SEED0, H_SEED1, H_SLOTS, H_TABLE, H_SIZE,
       H_MAXPROBE, H_MINVALIDITY, H_FLOOR, H_IDLE, H_KINDLEN, H_KIND };
enum { S_SEQ, S_META, S_HASH, S_EXPIRY, S_LIFETIME, S_UNIX, S_DATA };

static const uint64_t *segment;
static size_t segment_size, slot_count, slot_size;

static uint64_t load(const uint64_t *word) { return __atomic_load_n(word, __ATOMIC_RELAXED); }
static uint64_t load_acquire(const uint64_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

static uint64_t boottime_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                   \
    do {                                                                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                                  \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                                  \
    } while (0)

// SipHash-2-4 of `length` bytes under (k0, k1).
static uint64_t siphash24(const unsigned char *bytes, size_t length, uint64_t k0, uint64_t k1) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    size_t whole = length & ~(size_t)7, offset = 0;
    for (; offset < whole; offset += 8) {
        uint64_t m;
        memcpy(&m, bytes + offset, 8); /* little-endian hosts */
        v3 ^= m; SIPROUND; SIPROUND; v0 ^= m;
    }
    uint64_t last = (uint64_t)length << 56;
    for (int shift = 0; offset < length; offset++, shift += 8) last |= (uint64_t)bytes[offset] << shift;
    v3 ^= last; SIPROUND; SIPROUND; v0 ^= last;
    v2 ^= 0xff;
    SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

// Looks `id` up; prints one answer line.
static void lookup(const char *id, double min_validity) {
    size_t id_length = strlen(id);
    if (load_acquire(&segment[H_FLAGS]) & 1) { puts("UNUSABLE segment retired"); return; }
    uint64_t now = boottime_ns(), beat = load_acquire(&segment[H_HEARTBEAT]);
    if (now > beat && now - beat > STALE_NS) { puts("UNUSABLE agent heartbeat stale"); return; }
    uint64_t hash = siphash24((const unsigned char *)id, id_length, load(&segment[H_SEED0]), load(&segment[H_SEED1]));
    uint64_t probes = load_acquire(&segment[H_MAXPROBE]);
    if (probes > slot_count) probes = slot_count;
    if (probes > PROBE_CAP) probes = PROBE_CAP;
    size_t data_words = (slot_size - SLOT_HEADER) / 8;
    uint64_t copy[2048];
    size_t slot = hash & (slot_count - 1);
    for (uint64_t probe = 0; probe < probes; probe++, slot = (slot + 1) & (slot_count - 1)) {
        const uint64_t *words = segment + (HEADER_SIZE + slot * slot_size) / 8;
        for (int attempt = 0;; attempt++) {
            if (attempt > 4) { puts("UNUSABLE slot kept changing"); return; }
            uint64_t seq = load_acquire(&words[S_SEQ]);
            if (seq & 1) continue;
            uint64_t meta = load(&words[S_META]), slot_hash = load(&words[S_HASH]);
            uint64_t expiry = load(&words[S_EXPIRY]), lifetime = load(&words[S_LIFETIME]);
            int64_t unix_expiry = (int64_t)load(&words[S_UNIX]);
            uint64_t state = meta & 0xff, idl = (meta >> 16) & 0xffff, tokl = meta >> 32;
            size_t id_words = (idl + 7) / 8, token_words = (tokl + 7) / 8;
            int candidate = state == 1 && slot_hash == hash && idl == id_length;
            int in_bounds = id_words + token_words <= data_words && id_words + token_words <= 2048;
            if (candidate && in_bounds)
                for (size_t w = 0; w < id_words + token_words; w++) copy[w] = load(&words[S_DATA + w]);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (load(&words[S_SEQ]) != seq) continue;
            // The copy is whole: only the copy is used from here on.
            if (state == 0) { puts("MISS"); return; }
            if (!candidate) break;
            if (!in_bounds || tokl == 0) { puts("UNUSABLE slot lengths out of bounds"); return; }
            if (memcmp(copy, id, id_length) != 0) break;
            if (expiry <= now) { puts("MISS"); return; }
            double remaining = (double)(expiry - now) / 1e9, life = (double)lifetime / 1e9;
            double dflt = (double)load(&segment[H_MINVALIDITY]) / 1e9, floor_s = (double)load(&segment[H_FLOOR]) / 1e9;
            double required = min_validity >= 0 ? min_validity : (dflt < life / 4 ? dflt : life / 4);
            if (required < floor_s) required = floor_s;
            if (remaining < required) { puts("MISS"); return; }
            printf("HIT %.*s %lld\n", (int)tokl, (const char *)copy + id_words * 8, (long long)unix_expiry);
            return;
        }
    }
    puts("MISS");
}

static void seal_check(int fd) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int writable = open(path, O_RDWR);
    if (writable < 0) { printf("SEALCHECK open %s\n", strerror(errno)); return; }
    char byte = 'A';
    int pw = pwrite(writable, &byte, 1, 300) < 0 ? errno : 0;
    int tr = ftruncate(writable, 4096) < 0 ? errno : 0;
    void *map = mmap(NULL, segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, writable, 0);
    int mp = map == MAP_FAILED ? errno : 0;
    printf("SEALCHECK pwrite=%s ftruncate=%s mmap=%s\n", pw == EPERM ? "EPERM" : "ALLOWED",
           tr == EPERM ? "EPERM" : "ALLOWED", mp == EPERM ? "EPERM" : "ALLOWED");
    close(writable);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s SOCKET KIND [MIN-VALIDITY-S]\n", argv[0]); return 64; }
    double min_validity = argc > 3 ? atof(argv[3]) : -1;
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    if (connect(sock, (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); return 69; }
    char request[64];
    int request_length = snprintf(request, sizeof request, "SHM %s\n", argv[2]);
    if (write(sock, request, request_length) != request_length) { perror("write"); return 69; }

    char line[256];
    size_t filled = 0;
    int fd = -1;
    while (filled == 0 || line[filled - 1] != '\n') {
        union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
        struct iovec iov = {.iov_base = line + filled, .iov_len = sizeof line - 1 - filled};
        struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                                 .msg_controllen = sizeof control.buffer};
        ssize_t got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
        if (got <= 0) { fputs("agent closed the connection\n", stderr); return 69; }
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        if (header && header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(header), sizeof fd);
        filled += (size_t)got;
        if (filled >= sizeof line - 1) break;
    }
    line[filled] = 0;
    unsigned long long size = 0, generation = 0;
    int layout = 0;
    if (sscanf(line, "OK size=%llu layout=%d generation=%llu", &size, &layout, &generation) != 3 || fd < 0) {
        printf("NOSEGMENT %s", line);
        return 77;
    }
    struct stat status;
    if (layout != LAYOUT || fstat(fd, &status) != 0 || (unsigned long long)status.st_size != size) {
        puts("NOSEGMENT layout or size");
        return 77;
    }
    segment = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (segment == MAP_FAILED) { perror("mmap"); return 71; }
    segment_size = size;
    uint64_t counts = load(&segment[H_SLOTS]);
    slot_count = counts & 0xffffffff;
    slot_size = counts >> 32;
    if (load_acquire(&segment[H_MAGIC]) != MAGIC || (load(&segment[H_VERSION]) & 0xffffffff) != LAYOUT ||
        load(&segment[H_TABLE]) != HEADER_SIZE || load(&segment[H_SIZE]) != size || slot_count == 0 ||
        (slot_count & (slot_count - 1)) != 0 || slot_size % 8 != 0 || slot_size <= SLOT_HEADER ||
        slot_size > 16384 || HEADER_SIZE + slot_count * slot_size != size) {
        puts("NOSEGMENT damaged header");
        return 77;
    }
    printf("SEGMENT generation=%llu size=%llu\n", generation, size);
    fflush(stdout);
    char id[512];
    while (fgets(id, sizeof id, stdin)) {
        id[strcspn(id, "\r\n")] = 0;
        if (strcmp(id, "SEALCHECK") == 0) seal_check(fd);
        else lookup(id, min_validity);
        fflush(stdout);
    }
    return 0;
}
