// libfleet-tokend-reader: see fleet_tokend_reader.h; the protocol is docs/SHM.md's, the bytes
// fleet_tokend_segment.h's.

#define _GNU_SOURCE
#include "fleet_tokend_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static uint64_t load(const uint64_t *word) { return __atomic_load_n(word, __ATOMIC_RELAXED); }
static uint64_t load_acquire(const uint64_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

uint64_t ftr_boottime_ns(void) {
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

uint64_t ftr_siphash24(const void *data, size_t length, uint64_t k0, uint64_t k1) {
    const unsigned char *bytes = data;
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

const char *ftr_status_text(enum ftr_status status) {
    switch (status) {
    case FTR_OK: return "mapped";
    case FTR_NO_CONNECTION: return "the agent closed the connection";
    case FTR_REFUSED: return "refused";
    case FTR_NOT_SEALED: return "not sealed against writing, growing and shrinking";
    case FTR_OTHER_LAYOUT: return "not layout 2, the only one this reader reads";
    case FTR_SIZE: return "not the announced size";
    case FTR_MMAP_FAILED: return "mmap failed";
    case FTR_DAMAGED_HEADER: return "damaged header";
    case FTR_WRONG_KIND: return "segment is not of the kind asked for";
    }
    return "unknown";
}

// Whether the memory file behind `fd` can never change size or content again: sealed against
// shrinking, growing and writing. A file its owner could still shrink would kill us with SIGBUS.
static int is_sealed(int fd) {
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW) &&
           (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0;
}

// Whether the header at `words` describes exactly a mapping of `size` bytes of layout FTS_VERSION
// (docs/SHM.md, the reader's protocol, step 1), and if so its counts in `segment`.
static int header_fits(const uint64_t *words, uint64_t size, struct ftr_segment *segment) {
    uint64_t slots_word = load(&words[FTS_HEADER_SLOTS]), table = load(&words[FTS_HEADER_TABLE_OFFSET]);
    uint64_t slots = slots_word & FTS_SLOT_COUNT_MASK, slot_bytes = slots_word >> FTS_SLOT_SIZE_SHIFT;
    uint64_t entries = load(&words[FTS_HEADER_INDEX_COUNT]);
    if (load_acquire(&words[FTS_HEADER_MAGIC]) != FTS_MAGIC ||
        load(&words[FTS_HEADER_VERSION]) != ((uint64_t)FTS_HEADER_SIZE << FTS_HEADER_SIZE_SHIFT | FTS_VERSION) ||
        entries < 1 || entries >= FTS_COUNT_LIMIT || slots < 1 || slots >= FTS_COUNT_LIMIT ||
        table != FTS_TABLE_OFFSET(entries) || load(&words[FTS_HEADER_SEGMENT_SIZE]) != size || slot_bytes % 8 != 0 ||
        slot_bytes <= FTS_SLOT_HEADER_SIZE || slot_bytes > FTS_MAX_SLOT_SIZE || table + slots * slot_bytes != size)
        return 0;
    segment->slot_count = (size_t)slots;
    segment->slot_size = (size_t)slot_bytes;
    segment->index_count = (size_t)entries;
    segment->table_offset = (size_t)table;
    return 1;
}

// Whether the header at `words` names `kind`: up to 32 bytes in four little-endian words.
static int is_of_kind(const uint64_t *words, const char *kind) {
    uint64_t kind_length = load(&words[FTS_HEADER_KIND_LENGTH]);
    char header_kind[FTS_MAX_KIND_LENGTH + 1] = {0};
    for (uint64_t i = 0; i < kind_length && i < FTS_MAX_KIND_LENGTH; i++)
        header_kind[i] = (char)(load(&words[FTS_HEADER_KIND + i / 8]) >> (8 * (i % 8)));
    return kind_length == strlen(kind) && kind_length <= FTS_MAX_KIND_LENGTH &&
           memcmp(header_kind, kind, kind_length) == 0;
}

enum ftr_status ftr_segment_open(struct ftr_segment *segment, int fd, uint64_t size, int layout, uint64_t generation,
                                 const char *kind) {
    if (!is_sealed(fd)) { close(fd); return FTR_NOT_SEALED; }
    if (layout != FTS_VERSION) { close(fd); return FTR_OTHER_LAYOUT; }
    struct stat status;
    if (size < FTS_HEADER_SIZE || size > SIZE_MAX || fstat(fd, &status) != 0 || (uint64_t)status.st_size != size) {
        close(fd);
        return FTR_SIZE;
    }
    const uint64_t *mapped = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
        int error = errno;
        close(fd);
        errno = error;
        return FTR_MMAP_FAILED;
    }
    struct ftr_segment checked = {.words = mapped, .size = (size_t)size, .fd = fd, .generation = generation};
    enum ftr_status verdict = !header_fits(mapped, size, &checked) ? FTR_DAMAGED_HEADER
                              : !is_of_kind(mapped, kind)         ? FTR_WRONG_KIND
                                                                   : FTR_OK;
    if (verdict != FTR_OK) {
        munmap((void *)mapped, (size_t)size);
        close(fd);
        return verdict;
    }
    ftr_segment_close(segment);
    *segment = checked;
    return FTR_OK;
}

void ftr_segment_close(struct ftr_segment *segment) {
    if (segment->words) munmap((void *)segment->words, segment->size);
    if (segment->words && segment->fd >= 0) close(segment->fd);
    *segment = (struct ftr_segment){.words = NULL, .fd = -1};
}

// Sends `request` on `sock` and reads the one-line reply into `line` (at most `room` - 1 bytes,
// NUL-terminated, without its line break), with the descriptor that came with it in `*fd` (-1 if
// none; any other is closed). Returns 1 if the reply was a whole line, 0 if it was cut at `room`,
// -1 if the connection failed.
static int exchange(int sock, const char *request, char *line, size_t room, int *fd) {
    size_t request_length = strlen(request);
    *fd = -1;
    if (room < 2 || send(sock, request, request_length, MSG_NOSIGNAL) != (ssize_t)request_length) return -1;
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

enum ftr_status ftr_request_segment(int sock, const char *kind, struct ftr_segment *segment, char *reply, size_t room) {
    char request[64];
    int fd;
    if (strlen(kind) > FTS_MAX_KIND_LENGTH) return FTR_WRONG_KIND;
    // Names the one layout this reader reads; the agent offers the layout it writes.
    snprintf(request, sizeof request, "SHM %s %d\n", kind, FTS_VERSION);
    if (exchange(sock, request, reply, room, &fd) < 0) return FTR_NO_CONNECTION;
    unsigned long long size = 0, generation = 0;
    int layout = 0;
    if (sscanf(reply, "OK size=%llu layout=%d generation=%llu", &size, &layout, &generation) != 3 || fd < 0) {
        if (fd >= 0) close(fd);
        return FTR_REFUSED;
    }
    return ftr_segment_open(segment, fd, size, layout, generation, kind);
}

// Whether `length` bytes at `token` are a token the agent could serve: 1 to 16 KiB of printable
// ASCII without spaces. Nothing else is ever answered as a token.
//
// Eight bytes at a time: a word holds a byte outside 0x21 to 0x7E when it holds a byte under 0x21
// among those under 0x80 ((x - 0x21...) & ~x & 0x80..., which no byte of 0x21 or more sets, since
// subtracting from it borrows nothing), a byte 0x7F (the same test for a zero byte of x ^ 0x7F...),
// or a byte with its top bit set. The last 0 to 7 bytes one at a time.
static int is_servable_token(const char *token, size_t length) {
    if (length == 0 || length > FTS_MAX_TOKEN_LENGTH) return 0;
    const uint64_t ones = 0x0101010101010101ull, tops = 0x8080808080808080ull;
    uint64_t outside = 0;
    size_t i = 0;
    for (; i + 8 <= length; i += 8) {
        uint64_t x, del;
        memcpy(&x, token + i, 8);
        del = x ^ (ones * 0x7F);
        outside |= ((x - ones * 0x21) & ~x) | ((del - ones) & ~del) | x;
    }
    if (outside & tops) return 0;
    for (; i < length; i++)
        if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7F) return 0;
    return 1;
}

// A slot's words as copied under its sequence counter: the token is in the caller's copy.
struct slot_copy {
    uint64_t expiry, lifetime;
    int64_t unix_expiry;
    const char *token;
    size_t token_length;
};

// Whose a slot is, judged from a whole copy of it.
enum slot_holds {
    SLOT_EMPTY,    /* holding no token (emptied, maybe reused, after its entry was loaded) */
    SLOT_OTHER,    /* not the id's: another state, another hash or length, other id bytes */
    SLOT_ID,       /* the id's token */
    SLOT_DAMAGED,  /* the id's hash and length, but lengths that do not fit the slot */
    SLOT_CHANGING, /* FTS_COPY_ATTEMPTS attempts saw it change: use the socket */
};

// Copies slot `slot` into `copy` under its sequence counter (docs/SHM.md, the reader's protocol,
// step 3) and says whose it is; for SLOT_ID, `*found` describes the copy.
static enum slot_holds copy_slot(const struct ftr_segment *segment, size_t slot, uint64_t hash, const char *id,
                                 size_t id_length, uint64_t *copy, struct slot_copy *found) {
    const uint64_t *words = segment->words + (segment->table_offset + slot * segment->slot_size) / 8;
    size_t data_words = (segment->slot_size - FTS_SLOT_HEADER_SIZE) / 8;
    for (int attempt = 0; attempt < FTS_COPY_ATTEMPTS; attempt++) {
        uint64_t seq = load_acquire(&words[FTS_SLOT_SEQUENCE]);
        if (seq & 1) continue;
        uint64_t meta = load(&words[FTS_SLOT_META]), slot_hash = load(&words[FTS_SLOT_HASH]);
        uint64_t expiry = load(&words[FTS_SLOT_EXPIRY]), lifetime = load(&words[FTS_SLOT_LIFETIME]);
        int64_t unix_expiry = (int64_t)load(&words[FTS_SLOT_UNIX_EXPIRY]);
        uint64_t state = meta & FTS_META_STATE_MASK;
        uint64_t idl = (meta >> FTS_META_ID_LENGTH_SHIFT) & FTS_META_ID_LENGTH_MASK;
        uint64_t tokl = meta >> FTS_META_TOKEN_LENGTH_SHIFT;
        size_t id_words = (idl + 7) / 8, token_words = (tokl + 7) / 8;
        int candidate = state == FTS_STATE_LIVE && slot_hash == hash && idl == id_length;
        int in_bounds = id_words + token_words <= data_words;
        if (candidate && in_bounds)
            for (size_t w = 0; w < id_words + token_words; w++) copy[w] = load(&words[FTS_SLOT_DATA + w]);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (load(&words[FTS_SLOT_SEQUENCE]) != seq) continue;
        // The copy is whole: only the copy is used from here on.
        if (state == FTS_STATE_EMPTY) return SLOT_EMPTY;
        if (!candidate) return SLOT_OTHER;
        if (!in_bounds || tokl == 0) return SLOT_DAMAGED;
        if (memcmp(copy, id, id_length) != 0) return SLOT_OTHER;
        *found = (struct slot_copy){expiry, lifetime, unix_expiry, (const char *)copy + id_words * 8, tokl};
        return SLOT_ID;
    }
    return SLOT_CHANGING;
}

static enum ftr_answer unusable(struct ftr_result *result, const char *reason) {
    result->answer = FTR_UNUSABLE;
    result->reason = reason;
    return FTR_UNUSABLE;
}

// The answer for the id whose token `found` is, at `now` (CLOCK_BOOTTIME): a hit only for a token
// the agent could serve with enough validity left by its GET rule (the reader's protocol, steps 4
// and 5).
static enum ftr_answer judge(const struct ftr_segment *segment, const struct slot_copy *found, uint64_t now,
                             double min_validity, struct ftr_result *result) {
    if (!is_servable_token(found->token, found->token_length)) return unusable(result, "token is not printable ASCII");
    long long wall = (long long)time(NULL);
    if (found->unix_expiry < wall - FTS_EXPIRY_SLACK_S ||
        found->unix_expiry > wall + FTS_MAX_LIFETIME_S + FTS_EXPIRY_SLACK_S)
        return unusable(result, "token expiry out of range");
    if (found->expiry <= now) return FTR_MISS;
    double remaining = (double)(found->expiry - now) / 1e9, life = (double)found->lifetime / 1e9;
    double dflt = (double)load(&segment->words[FTS_HEADER_MIN_VALIDITY]) / 1e9;
    double floor_s = (double)load(&segment->words[FTS_HEADER_SERVING_FLOOR]) / 1e9;
    double required = min_validity >= 0 ? min_validity : (dflt < life / 4 ? dflt : life / 4);
    if (required < floor_s) required = floor_s;
    if (remaining < required) return FTR_MISS;
    result->answer = FTR_HIT;
    result->unix_expiry = (long long)found->unix_expiry;
    result->token_length = found->token_length;
    memcpy(result->token, found->token, found->token_length);
    result->token[found->token_length] = 0;
    return FTR_HIT;
}

// Probes index entries, each naming a slot: the probe starts at the high 64 bits of hash * the
// index count, goes on linearly, wrapping to 0, and stops after min(max probe, count, probe cap).
enum ftr_answer ftr_lookup(const struct ftr_segment *segment, const char *id, size_t id_length, double min_validity,
                           struct ftr_result *result) {
    // Not the whole result: its token's room is 16 KiB.
    result->answer = FTR_MISS;
    result->reason = NULL;
    result->unix_expiry = 0;
    result->token_length = 0;
    result->token[0] = 0;
    const uint64_t *words = segment->words;
    if (!words) return unusable(result, "no segment");
    if (load_acquire(&words[FTS_HEADER_FLAGS]) & FTS_FLAG_RETIRED) return unusable(result, FTR_REASON_RETIRED);
    uint64_t now = ftr_boottime_ns(), beat = load_acquire(&words[FTS_HEADER_HEARTBEAT]);
    if (now > beat && now - beat > FTS_STALE_HEARTBEAT_NS) return unusable(result, FTR_REASON_STALE);
    uint64_t hash = ftr_siphash24(id, id_length, load(&words[FTS_HEADER_SEED0]), load(&words[FTS_HEADER_SEED1]));
    size_t positions = segment->index_count;
    uint64_t probes = load_acquire(&words[FTS_HEADER_MAX_PROBE]);
    if (probes > positions) probes = positions;
    if (probes > FTS_PROBE_CAP) probes = FTS_PROBE_CAP;
    size_t position = (size_t)(((unsigned __int128)hash * positions) >> 64);
    uint64_t copy[FTS_MAX_SLOT_SIZE / 8];
    for (uint64_t probe = 0; probe < probes; probe++, position = position + 1 == positions ? 0 : position + 1) {
        // The entry is stored (release) after its slot is written: a slot it names is complete.
        uint64_t entry = load_acquire(&words[FTS_HEADER_SIZE / 8 + position]);
        if (entry == FTS_INDEX_EMPTY) return FTR_MISS;
        uint64_t slot_plus_one = entry & FTS_INDEX_SLOT_MASK;
        if (slot_plus_one == FTS_INDEX_REMOVED || (entry & FTS_INDEX_HASH_MASK) != (hash & FTS_INDEX_HASH_MASK)) continue;
        if (slot_plus_one == 0 || slot_plus_one - 1 >= segment->slot_count)
            return unusable(result, "index entry out of range");
        struct slot_copy found;
        switch (copy_slot(segment, (size_t)(slot_plus_one - 1), hash, id, id_length, copy, &found)) {
        case SLOT_ID: return judge(segment, &found, now, min_validity, result);
        case SLOT_EMPTY: /* emptied (and maybe reused) after the entry was loaded: the id may be further on */
        case SLOT_OTHER: break;
        case SLOT_DAMAGED: return unusable(result, "slot lengths out of bounds");
        case SLOT_CHANGING: return unusable(result, "slot kept changing");
        }
    }
    return FTR_MISS;
}
