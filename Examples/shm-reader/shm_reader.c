// A reader of fleet-tokend's shared-memory segments in plain C: what a Go, Python or Java worker
// on the same host would do (docs/SHM.md). It asks the agent for a kind's segment over the socket,
// maps the descriptor read-only, and answers ids read from standard input, one per line:
//
//   HIT <token> <unix-expiry>     the segment holds the id's token with enough validity left
//   MISS                          it does not: ask the agent with GET
//   UNUSABLE <reason>             retired, stale heartbeat, or damaged: ask for a new segment
//
// Nothing handed over is trusted: the descriptor is mapped only if the file is sealed against
// writing, growing and shrinking and has the announced size, the header must name the kind asked
// for, and a token is printed only when it is printable ASCII (so it cannot hold a line break) with
// an expiry the agent could serve.
//
// A line "SEALCHECK" instead re-opens the descriptor read-write through /proc and reports what
// pwrite, ftruncate and a writable mmap gave (all must fail with EPERM). "STRESS" and "FOLLOW"
// are the test modes described at their functions.
//
//   cc -O2 -std=c11 -o shm-reader shm_reader.c
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
#define MAX_TOKEN 16384              /* the agent's longest token */
#define MAX_LIFETIME_S 2592000LL     /* the agent keeps a token at most 30 days */
#define EXPIRY_SLACK_S 86400LL       /* a day either side, for wall-clock steps */
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

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

enum answer { HIT, MISS, UNUSABLE };

struct result {
    enum answer answer;
    const char *reason;     /* UNUSABLE */
    const char *token;      /* HIT: in the copy, not NUL-terminated */
    size_t token_length;
    long long unix_expiry;
};

static uint64_t copy[2048];

// Whether `length` bytes at `token` are a token the agent could serve: 1 to 16 KiB of printable
// ASCII without spaces. Nothing else is ever printed as a token.
static int is_servable_token(const char *token, size_t length) {
    if (length == 0 || length > MAX_TOKEN) return 0;
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7F) return 0;
    return 1;
}

// Prints `text` with every byte that is not printable ASCII as '?': the peer's words, never a line
// or a terminal sequence of its own.
static void print_escaped(FILE *out, const char *text) {
    for (; *text; text++) fputc((unsigned char)*text >= 0x20 && (unsigned char)*text < 0x7F ? *text : '?', out);
    fputc('\n', out);
}

// Whether the memory file behind `fd` can never change size or content again: sealed against
// shrinking, growing and writing. A file its owner could still shrink would kill us with SIGBUS.
static int is_sealed(int fd) {
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW) &&
           (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0;
}

// Looks `id` up in the mapped segment.
static struct result lookup(const char *id, double min_validity) {
    struct result result = {.answer = MISS};
    size_t id_length = strlen(id);
    if (load_acquire(&segment[H_FLAGS]) & 1) return (struct result){UNUSABLE, "segment retired", 0, 0, 0};
    uint64_t now = boottime_ns(), beat = load_acquire(&segment[H_HEARTBEAT]);
    if (now > beat && now - beat > STALE_NS) return (struct result){UNUSABLE, "agent heartbeat stale", 0, 0, 0};
    uint64_t hash = siphash24((const unsigned char *)id, id_length, load(&segment[H_SEED0]), load(&segment[H_SEED1]));
    uint64_t probes = load_acquire(&segment[H_MAXPROBE]);
    if (probes > slot_count) probes = slot_count;
    if (probes > PROBE_CAP) probes = PROBE_CAP;
    size_t data_words = (slot_size - SLOT_HEADER) / 8;
    // The home slot: the high 64 bits of hash * slot count (any table size).
    size_t slot = (size_t)(((unsigned __int128)hash * slot_count) >> 64);
    for (uint64_t probe = 0; probe < probes; probe++, slot = slot + 1 == slot_count ? 0 : slot + 1) {
        const uint64_t *words = segment + (HEADER_SIZE + slot * slot_size) / 8;
        for (int attempt = 0;; attempt++) {
            if (attempt > 4) return (struct result){UNUSABLE, "slot kept changing", 0, 0, 0};
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
            if (state == 0) return result;
            if (!candidate) break;
            if (!in_bounds || tokl == 0) return (struct result){UNUSABLE, "slot lengths out of bounds", 0, 0, 0};
            if (memcmp(copy, id, id_length) != 0) break;
            const char *token = (const char *)copy + id_words * 8;
            if (!is_servable_token(token, tokl)) return (struct result){UNUSABLE, "token is not printable ASCII", 0, 0, 0};
            long long wall = (long long)time(NULL);
            if (unix_expiry < wall - EXPIRY_SLACK_S || unix_expiry > wall + MAX_LIFETIME_S + EXPIRY_SLACK_S)
                return (struct result){UNUSABLE, "token expiry out of range", 0, 0, 0};
            if (expiry <= now) return result;
            double remaining = (double)(expiry - now) / 1e9, life = (double)lifetime / 1e9;
            double dflt = (double)load(&segment[H_MINVALIDITY]) / 1e9, floor_s = (double)load(&segment[H_FLOOR]) / 1e9;
            double required = min_validity >= 0 ? min_validity : (dflt < life / 4 ? dflt : life / 4);
            if (required < floor_s) required = floor_s;
            if (remaining < required) return result;
            return (struct result){HIT, NULL, token, tokl, (long long)unix_expiry};
        }
    }
    return result;
}

static void answer(const char *id, double min_validity) {
    struct result result = lookup(id, min_validity);
    if (result.answer == HIT) printf("HIT %.*s %lld\n", (int)result.token_length, result.token, result.unix_expiry);
    else if (result.answer == MISS) puts("MISS");
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
    void *map = mmap(NULL, segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, writable, 0);
    int mp = map == MAP_FAILED ? errno : 0;
    printf("SEALCHECK pwrite=%s ftruncate=%s mmap=%s\n", pw == EPERM ? "EPERM" : "ALLOWED",
           tr == EPERM ? "EPERM" : "ALLOWED", mp == EPERM ? "EPERM" : "ALLOWED");
    close(writable);
}

static int segment_fd = -1;
static const char *socket_path;

// Asks for `kind`'s segment on `sock` and maps it (unmapping an earlier one). Returns 0, or prints
// why not and returns the exit status for it.
static int map_segment(int sock, const char *kind, int announce) {
    char request[64];
    int request_length = snprintf(request, sizeof request, "SHM %s\n", kind);
    if (send(sock, request, request_length, MSG_NOSIGNAL) != request_length) return 69;
    char line[256];
    size_t filled = 0;
    int fd = -1;
    while (filled == 0 || line[filled - 1] != '\n') {
        union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
        struct iovec iov = {.iov_base = line + filled, .iov_len = 1}; /* byte by byte: never read past the line */
        struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                                 .msg_controllen = sizeof control.buffer};
        ssize_t got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
        if (got <= 0) return 69;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        if (header && header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
            int received;
            memcpy(&received, CMSG_DATA(header), sizeof received);
            if (fd < 0) fd = received;
            else close(received); /* one descriptor per reply: any other is closed */
        }
        filled += (size_t)got;
        if (filled >= sizeof line - 1) break;
    }
    line[filled] = 0;
    line[strcspn(line, "\r\n")] = 0;
    unsigned long long size = 0, generation = 0;
    int layout = 0;
    if (sscanf(line, "OK size=%llu layout=%d generation=%llu", &size, &layout, &generation) != 3 || fd < 0) {
        fputs("NOSEGMENT ", announce ? stdout : stderr);
        print_escaped(announce ? stdout : stderr, line);
        if (fd >= 0) close(fd);
        return 77;
    }
    if (!is_sealed(fd)) {
        fputs("NOSEGMENT not sealed against writing, growing and shrinking\n", announce ? stdout : stderr);
        close(fd);
        return 77;
    }
    struct stat status;
    if (layout != LAYOUT || fstat(fd, &status) != 0 || (unsigned long long)status.st_size != size) {
        fputs("NOSEGMENT layout or size\n", announce ? stdout : stderr);
        close(fd);
        return 77;
    }
    const uint64_t *mapped = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) { perror("mmap"); close(fd); return 71; }
    uint64_t counts = __atomic_load_n(&mapped[H_SLOTS], __ATOMIC_RELAXED);
    size_t slots = counts & 0xffffffff, slot_bytes = counts >> 32;
    if (load_acquire(&mapped[H_MAGIC]) != MAGIC || (load(&mapped[H_VERSION]) & 0xffffffff) != LAYOUT ||
        load(&mapped[H_TABLE]) != HEADER_SIZE || load(&mapped[H_SIZE]) != size || slots == 0 ||
        slot_bytes % 8 != 0 || slot_bytes <= SLOT_HEADER || slot_bytes > 16384 ||
        HEADER_SIZE + slots * slot_bytes != size) {
        fputs("NOSEGMENT damaged header\n", announce ? stdout : stderr);
        munmap((void *)mapped, size);
        close(fd);
        return 77;
    }
    // The kind's name, up to 32 bytes in four little-endian words, must be the kind asked for.
    uint64_t kind_length = load(&mapped[H_KINDLEN]);
    char header_kind[33] = {0};
    for (uint64_t i = 0; i < kind_length && i < 32; i++)
        header_kind[i] = (char)(load(&mapped[H_KIND + i / 8]) >> (8 * (i % 8)));
    if (kind_length != strlen(kind) || kind_length > 32 || memcmp(header_kind, kind, kind_length) != 0) {
        fprintf(announce ? stdout : stderr, "NOSEGMENT segment is not of kind %s\n", kind);
        munmap((void *)mapped, size);
        close(fd);
        return 77;
    }
    if (segment) munmap((void *)segment, segment_size);
    if (segment_fd >= 0) close(segment_fd);
    segment = mapped;
    segment_size = size;
    segment_fd = fd;
    slot_count = slots;
    slot_size = slot_bytes;
    if (announce) printf("SEGMENT generation=%llu size=%llu\n", generation, size);
    return 0;
}

// "STRESS <seconds> <count> <prefix>": reads ids <prefix>0 .. <prefix>(count-1) at random for that
// long (or until a STOP line arrives on standard input), checking every hit: the token's last part must be `<id>_<n x's>_<n>` (the test provider's
// pad- tokens) and its Unix expiry ahead. A retired segment is replaced and the read retried;
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
        struct result result = lookup(id, min_validity);
        for (int again = 0; result.answer == UNUSABLE && again < 3; again++) {
            unusable++;
            if (strcmp(result.reason, "segment retired") != 0) break;
            if (map_segment(sock, kind, 0) != 0) break;
            remaps++;
            result = lookup(id, min_validity);
        }
        if (result.answer == MISS) { misses++; continue; }
        if (result.answer == UNUSABLE) {
            // A slot that kept changing (the writer was descheduled mid-write) is read through the
            // socket by a real reader; a retired segment that could not be replaced is a lost read.
            if (strcmp(result.reason, "segment retired") == 0) lost++;
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
// new one. Prints the counts and the last answer.
static void follow(int *sock, const char *kind, const char *arguments, double min_validity) {
    double seconds = 0;
    char id[160] = {0};
    if (sscanf(arguments, "%lf %159s", &seconds, id) != 2) {
        puts("FOLLOW bad arguments");
        return;
    }
    unsigned long long reads = 0, hits = 0, misses = 0, reconnects = 0, lost = 0, hits_after_reconnect = 0;
    uint64_t end = boottime_ns() + (uint64_t)(seconds * 1e9);
    struct result result = {.answer = MISS};
    while (boottime_ns() < end) {
        reads++;
        result = lookup(id, min_validity);
        if (result.answer == UNUSABLE) {
            // Ask again on this connection; if the agent went away, on a new one.
            int mapped = map_segment(*sock, kind, 0) == 0;
            if (!mapped) {
                close(*sock);
                *sock = connect_agent();
                mapped = *sock >= 0 && map_segment(*sock, kind, 0) == 0;
                if (mapped) reconnects++;
            }
            if (!mapped) { lost++; continue; }
            result = lookup(id, min_validity);
        }
        if (result.answer == HIT) {
            hits++;
            if (reconnects > 0) hits_after_reconnect++;
        } else if (result.answer == MISS) {
            misses++;
        } else {
            lost++;
        }
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    printf("FOLLOW reads=%llu hits=%llu misses=%llu reconnects=%llu lost=%llu hits_after_reconnect=%llu last=%s\n",
           reads, hits, misses, reconnects, lost, hits_after_reconnect,
           result.answer == HIT ? "HIT" : result.answer == MISS ? "MISS" : "UNUSABLE");
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s SOCKET KIND [MIN-VALIDITY-S]\n", argv[0]); return 64; }
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
        if (strcmp(id, "SEALCHECK") == 0) seal_check(segment_fd);
        else if (strncmp(id, "STRESS ", 7) == 0) stress(sock, argv[2], id + 7, min_validity);
        else if (strncmp(id, "FOLLOW ", 7) == 0) follow(&sock, argv[2], id + 7, min_validity);
        else answer(id, min_validity);
        fflush(stdout);
    }
    return 0;
}
