// A reader of fleet-tokend's shared-memory segments in plain C: what a Go, Python or Java worker
// on the same host would do (docs/SHM.md). It asks the agent for a kind's segment over the socket
// (layout 1 or 2), maps the descriptor read-only, and answers ids read from standard input, one
// per line:
//
//   HIT <token> <unix-expiry>     the segment holds the id's token with enough validity left
//   MISS                          it does not: ask the agent with GET
//   UNUSABLE <reason>             retired, stale heartbeat, or damaged: ask for a new segment
//
// Nothing handed over is trusted: the descriptor is mapped only if the file is sealed against
// writing, growing and shrinking and has the announced size, the header must be of the announced
// layout and name the kind asked for, and a token is printed only when it is printable ASCII (so it
// cannot hold a line break) with an expiry the agent could serve.
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
#define HEADER_SIZE 256
#define SLOT_HEADER 48
#define PROBE_CAP 4096
#define MAX_SLOT_SIZE 16384
#define BELOW_2_31 0x80000000ULL     /* layout 2's slot and index counts are below 2^31 */
#define REMOVED 0xffffffffULL        /* layout 2: an index entry's low 32 bits once its key is removed */
#define STALE_NS 3000000000ULL
#define MAX_TOKEN 16384              /* the agent's longest token */
#define MAX_LIFETIME_S 2592000LL     /* the agent keeps a token at most 30 days */
#define EXPIRY_SLACK_S 86400LL       /* a day either side, for wall-clock steps */
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

// Header words (H_KIND is four words; H_INDEX is layout 2's index count) and slot words, the same
// in both layouts.
enum { H_MAGIC, H_VERSION, H_GENERATION, H_FLAGS, H_HEARTBEAT, H_SEED0, H_SEED1, H_SLOTS, H_TABLE, H_SIZE,
       H_MAXPROBE, H_MINVALIDITY, H_FLOOR, H_IDLE, H_KINDLEN, H_KIND, H_INDEX = H_KIND + 4 };
enum { S_SEQ, S_META, S_HASH, S_EXPIRY, S_LIFETIME, S_UNIX, S_DATA };

// The mapped segment, as its checked header describes it. Layout 1: slots from byte 256, probed
// directly. Layout 2: `index_count` one-word index entries from byte 256, then slots from
// `table_offset`.
static const uint64_t *segment;
static int layout;
static size_t segment_size, slot_count, slot_size, index_count, table_offset;

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

// A slot's words as copied under its sequence counter: the token is in `copy`.
struct slot_copy {
    uint64_t expiry, lifetime;
    int64_t unix_expiry;
    const char *token;
    size_t token_length;
};

// Whose a slot is, judged from a whole copy of it.
enum slot_holds {
    SLOT_EMPTY,    /* state 0: never used (layout 1), or holding no token (layout 2) */
    SLOT_OTHER,    /* not the id's: a tombstone or another state, another hash or length, other id bytes */
    SLOT_ID,       /* the id's token */
    SLOT_DAMAGED,  /* the id's hash and length, but lengths that do not fit the slot */
    SLOT_CHANGING, /* five attempts saw it change: use the socket */
};

// Copies slot `slot` under its sequence counter (docs/SHM.md, the reader's protocol, step 3) and
// says whose it is; for SLOT_ID, `*found` holds the copy. Both layouts' slots are read this way.
static enum slot_holds copy_slot(size_t slot, uint64_t hash, const char *id, size_t id_length,
                                 struct slot_copy *found) {
    const uint64_t *words = segment + (table_offset + slot * slot_size) / 8;
    size_t data_words = (slot_size - SLOT_HEADER) / 8;
    for (int attempt = 0; attempt < 5; attempt++) {
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
        if (state == 0) return SLOT_EMPTY;
        if (!candidate) return SLOT_OTHER;
        if (!in_bounds || tokl == 0) return SLOT_DAMAGED;
        if (memcmp(copy, id, id_length) != 0) return SLOT_OTHER;
        *found = (struct slot_copy){expiry, lifetime, unix_expiry, (const char *)copy + id_words * 8, tokl};
        return SLOT_ID;
    }
    return SLOT_CHANGING;
}

// The answer for the id whose token `found` is, at `now` (CLOCK_BOOTTIME): a hit only for a token
// the agent could serve with enough validity left by its GET rule (the reader's protocol, steps 4
// and 5).
static struct result judge(const struct slot_copy *found, uint64_t now, double min_validity) {
    if (!is_servable_token(found->token, found->token_length))
        return (struct result){UNUSABLE, "token is not printable ASCII", 0, 0, 0};
    long long wall = (long long)time(NULL);
    if (found->unix_expiry < wall - EXPIRY_SLACK_S || found->unix_expiry > wall + MAX_LIFETIME_S + EXPIRY_SLACK_S)
        return (struct result){UNUSABLE, "token expiry out of range", 0, 0, 0};
    if (found->expiry <= now) return (struct result){.answer = MISS};
    double remaining = (double)(found->expiry - now) / 1e9, life = (double)found->lifetime / 1e9;
    double dflt = (double)load(&segment[H_MINVALIDITY]) / 1e9, floor_s = (double)load(&segment[H_FLOOR]) / 1e9;
    double required = min_validity >= 0 ? min_validity : (dflt < life / 4 ? dflt : life / 4);
    if (required < floor_s) required = floor_s;
    if (remaining < required) return (struct result){.answer = MISS};
    return (struct result){HIT, NULL, found->token, found->token_length, (long long)found->unix_expiry};
}

// Looks `id` up in the mapped segment. Layout 1 probes slots; layout 2 probes index entries, each
// naming a slot. Either way the probe starts at the high 64 bits of hash * their count (any count),
// goes on linearly, wrapping to 0, and stops after min(max probe, count, 4096).
static struct result lookup(const char *id, double min_validity) {
    const struct result miss = {.answer = MISS};
    size_t id_length = strlen(id);
    if (load_acquire(&segment[H_FLAGS]) & 1) return (struct result){UNUSABLE, "segment retired", 0, 0, 0};
    uint64_t now = boottime_ns(), beat = load_acquire(&segment[H_HEARTBEAT]);
    if (now > beat && now - beat > STALE_NS) return (struct result){UNUSABLE, "agent heartbeat stale", 0, 0, 0};
    uint64_t hash = siphash24((const unsigned char *)id, id_length, load(&segment[H_SEED0]), load(&segment[H_SEED1]));
    size_t positions = layout == 1 ? slot_count : index_count;
    uint64_t probes = load_acquire(&segment[H_MAXPROBE]);
    if (probes > positions) probes = positions;
    if (probes > PROBE_CAP) probes = PROBE_CAP;
    size_t position = (size_t)(((unsigned __int128)hash * positions) >> 64);
    for (uint64_t probe = 0; probe < probes; probe++, position = position + 1 == positions ? 0 : position + 1) {
        size_t slot = position;
        if (layout == 2) {
            // The entry is stored (release) after its slot is written: a slot it names is complete.
            uint64_t entry = load_acquire(&segment[HEADER_SIZE / 8 + position]);
            if (entry == 0) return miss; /* never used */
            uint64_t slot_plus_one = entry & 0xffffffff;
            if (slot_plus_one == REMOVED || entry >> 32 != hash >> 32) continue;
            if (slot_plus_one == 0 || slot_plus_one - 1 >= slot_count)
                return (struct result){UNUSABLE, "index entry out of range", 0, 0, 0};
            slot = slot_plus_one - 1;
        }
        struct slot_copy found;
        switch (copy_slot(slot, hash, id, id_length, &found)) {
        case SLOT_ID: return judge(&found, now, min_validity);
        case SLOT_EMPTY:
            // Layout 1: a never-used slot ends the probe. Layout 2: the slot was emptied (and may
            // be reused) after the entry was loaded; the id may have an entry further on.
            if (layout == 1) return miss;
            break;
        case SLOT_OTHER: break;
        case SLOT_DAMAGED: return (struct result){UNUSABLE, "slot lengths out of bounds", 0, 0, 0};
        case SLOT_CHANGING: return (struct result){UNUSABLE, "slot kept changing", 0, 0, 0};
        }
    }
    return miss;
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

// Sends `request` on `sock` and reads the one-line reply into `line` (at most `room` - 1 bytes,
// NUL-terminated, without its line break), with the descriptor that came with it in `*fd` (-1 if
// none; any other is closed). Returns 1 if the reply was a whole line, 0 if it was cut at `room`,
// -1 if the connection failed.
static int exchange(int sock, const char *request, char *line, size_t room, int *fd) {
    size_t request_length = strlen(request);
    *fd = -1;
    if (send(sock, request, request_length, MSG_NOSIGNAL) != (ssize_t)request_length) return -1;
    size_t filled = 0;
    while (filled == 0 || line[filled - 1] != '\n') {
        union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
        struct iovec iov = {.iov_base = line + filled, .iov_len = 1}; /* byte by byte: never read past the line */
        struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                                 .msg_controllen = sizeof control.buffer};
        ssize_t got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
        if (got <= 0) {
            if (*fd >= 0) close(*fd);
            *fd = -1;
            return -1;
        }
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        if (header && header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
            int received;
            memcpy(&received, CMSG_DATA(header), sizeof received);
            if (*fd < 0) *fd = received;
            else close(received); /* one descriptor per reply: any other is closed */
        }
        filled += (size_t)got;
        if (filled >= room - 1) break;
    }
    int whole = line[filled - 1] == '\n';
    line[filled] = 0;
    line[strcspn(line, "\r\n")] = 0;
    return whole;
}

// Asks for `kind`'s segment on `sock` and maps it (unmapping an earlier one). Returns 0, or prints
// why not and returns the exit status for it.
static int map_segment(int sock, const char *kind, int announce) {
    FILE *out = announce ? stdout : stderr;
    char request[64], line[256];
    int fd;
    // Ask for either layout. An agent older than layout 2 refuses the layouts with
    // "ERR bad-request usage: SHM <kind>": ask it again without them, as a layout-1 reader does.
    snprintf(request, sizeof request, "SHM %s 1 2\n", kind);
    int got = exchange(sock, request, line, sizeof line, &fd);
    if (got == 1 && strncmp(line, "ERR bad-request", 15) == 0) {
        if (fd >= 0) close(fd);
        snprintf(request, sizeof request, "SHM %s\n", kind);
        got = exchange(sock, request, line, sizeof line, &fd);
    }
    if (got < 0) return 69;
    unsigned long long size = 0, generation = 0;
    int announced = 0;
    if (sscanf(line, "OK size=%llu layout=%d generation=%llu", &size, &announced, &generation) != 3 || fd < 0) {
        fputs("NOSEGMENT ", out);
        print_escaped(out, line);
        if (fd >= 0) close(fd);
        return 77;
    }
    if (!is_sealed(fd)) {
        fputs("NOSEGMENT not sealed against writing, growing and shrinking\n", out);
        close(fd);
        return 77;
    }
    struct stat status;
    if ((announced != 1 && announced != 2) || size < HEADER_SIZE || fstat(fd, &status) != 0 ||
        (unsigned long long)status.st_size != size) {
        fputs("NOSEGMENT layout or size\n", out);
        close(fd);
        return 77;
    }
    const uint64_t *mapped = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) { perror("mmap"); close(fd); return 71; }
    // The header must be of the announced layout and describe exactly the mapping. Layout 1's slots
    // follow the header; layout 2's follow its index, at the next multiple of 64 bytes.
    uint64_t counts = load(&mapped[H_SLOTS]), table = load(&mapped[H_TABLE]);
    size_t slots = counts & 0xffffffff, slot_bytes = counts >> 32;
    uint64_t entries = announced == 2 ? load(&mapped[H_INDEX]) : 0;
    int counts_fit = announced == 1 || (entries >= 1 && entries < BELOW_2_31 && slots < BELOW_2_31);
    uint64_t expected_table = announced == 1 ? HEADER_SIZE : (HEADER_SIZE + 8 * entries + 63) & ~63ULL;
    if (load_acquire(&mapped[H_MAGIC]) != MAGIC ||
        load(&mapped[H_VERSION]) != ((uint64_t)HEADER_SIZE << 32 | (uint64_t)announced) || !counts_fit ||
        table != expected_table || load(&mapped[H_SIZE]) != size || slots == 0 || slot_bytes % 8 != 0 ||
        slot_bytes <= SLOT_HEADER || slot_bytes > MAX_SLOT_SIZE || table + slots * slot_bytes != size) {
        fputs("NOSEGMENT damaged header\n", out);
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
        fprintf(out, "NOSEGMENT segment is not of kind %s\n", kind);
        munmap((void *)mapped, size);
        close(fd);
        return 77;
    }
    if (segment) munmap((void *)segment, segment_size);
    if (segment_fd >= 0) close(segment_fd);
    segment = mapped;
    layout = announced;
    segment_size = size;
    segment_fd = fd;
    slot_count = slots;
    slot_size = slot_bytes;
    index_count = entries;
    table_offset = table;
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
        if (reads == 1) {
            printf("FOLLOWING %s\n", result.answer == HIT ? "HIT" : result.answer == MISS ? "MISS" : "UNUSABLE");
            fflush(stdout);
        }
        if (hits_after_reconnect >= 100) break;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    printf("FOLLOW reads=%llu hits=%llu misses=%llu reconnects=%llu lost=%llu hits_after_reconnect=%llu last=%s\n",
           reads, hits, misses, reconnects, lost, hits_after_reconnect,
           result.answer == HIT ? "HIT" : result.answer == MISS ? "MISS" : "UNUSABLE");
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s SOCKET KIND [MIN-VALIDITY-S]\n", argv[0]); return 64; }
    if (strlen(argv[2]) > 32) { fputs("a kind is at most 32 bytes\n", stderr); return 64; }
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
