#ifndef FLEET_TOKEND_READER_H
#define FLEET_TOKEND_READER_H

// libfleet-tokend-reader: fleet-tokend's shared-memory segments read from C, as a Go, Python or
// Java worker on the same host would read them (docs/SHM.md). It asks the agent for a kind's
// segment over the agent's socket, maps the descriptor read-only, and looks ids up in it under
// each slot's seqlock. The bytes are fleet_tokend_segment.h's, the header the agent's writer is
// built from.
//
// Nothing handed over is trusted: a descriptor is mapped only if its memory file is sealed against
// writing, growing and shrinking and has the announced size; the header must be of layout
// FTS_VERSION (the only one read), describe exactly the mapping and name the kind asked for; and
// a token is answered only when it is one the agent could serve (printable ASCII, an expiry in
// range). A lookup that cannot answer says why, and the caller asks the agent's socket (GET).
//
// Linux only (memfd seals, SCM_RIGHTS, CLOCK_BOOTTIME). A segment may be read by many threads at
// once; ftr_segment_open and ftr_segment_close are the caller's to serialise. pkg-config:
// fleet-tokend-reader.

#include <stddef.h>
#include <stdint.h>

#include "fleet_tokend_segment.h"

#ifdef __cplusplus
extern "C" {
#endif

// A mapped segment, as its checked header describes it. Read-only for the caller; one set to
// zeros (or closed) holds none.
struct ftr_segment {
    const uint64_t *words;   // the mapping (PROT_READ), NULL when none
    size_t size;             // bytes mapped
    int fd;                  // the memory file's descriptor, closed by ftr_segment_close
    uint64_t generation;     // the segment's generation, as the reply that offered it announced
    size_t slot_count, slot_size, index_count, table_offset;
};

// Why there is no segment (ftr_request_segment, ftr_segment_open).
enum ftr_status {
    FTR_OK = 0,
    FTR_NO_CONNECTION,   // the connection failed or the agent closed it
    FTR_REFUSED,         // the agent answered something other than an offer (the reply says what)
    FTR_NOT_SEALED,      // the memory file is not sealed against writing, growing and shrinking
    FTR_OTHER_LAYOUT,    // the reply offers a layout other than FTS_VERSION
    FTR_SIZE,            // the file is not the announced size, or too small for a header
    FTR_MMAP_FAILED,     // mmap failed (errno says why)
    FTR_DAMAGED_HEADER,  // the header does not describe the mapping as the announced layout
    FTR_WRONG_KIND,      // the segment is of another kind than the one asked for
};

// A few words on `status`, for a message.
const char *ftr_status_text(enum ftr_status status);

// Maps `fd`, which an `OK size=<size> layout=<layout> generation=<generation>` reply to
// `SHM <kind>` carried, after checking its seals and size, then checks the header against `size`,
// `layout` and `kind`. On
// FTR_OK `segment` holds the mapping and `fd`; on anything else `fd` is closed and `segment` is
// left as it was. Either way the caller gives `fd` up.
enum ftr_status ftr_segment_open(struct ftr_segment *segment, int fd, uint64_t size, int layout, uint64_t generation,
                                 const char *kind);

// Unmaps the segment and closes its descriptor; `segment` then holds none.
void ftr_segment_close(struct ftr_segment *segment);

// Sends `SHM <kind> 2` on `sock` (a connected stream socket to the agent) and opens the segment
// the reply offers: `segment` is replaced (the one it held closed) only on FTR_OK. The reply's
// line, without its line break and cut to `room` - 1 bytes, is left in `reply` (NUL-terminated;
// room for 256 bytes is plenty).
enum ftr_status ftr_request_segment(int sock, const char *kind, struct ftr_segment *segment, char *reply, size_t room);

// What a lookup found.
enum ftr_answer {
    FTR_HIT,       // the id's token, with enough validity left by the agent's own GET rule
    FTR_MISS,      // no token for the id, or one without enough validity: ask the agent (GET)
    FTR_UNUSABLE,  // the segment cannot answer (reason): retired, stale, damaged, or a slot that
                   // kept changing; ask the agent, and for a new segment when it was retired
};

struct ftr_result {
    enum ftr_answer answer;
    const char *reason;              // FTR_UNUSABLE: a static string
    long long unix_expiry;           // FTR_HIT: the token's expiry, Unix seconds
    size_t token_length;             // FTR_HIT
    char token[FTS_MAX_TOKEN_LENGTH + 1]; // FTR_HIT: the token, NUL-terminated
};

// The reasons FTR_UNUSABLE names for a segment to replace: ask the agent for its new segment
// (retired), or connect again (stale: the agent is gone).
#define FTR_REASON_RETIRED "segment retired"
#define FTR_REASON_STALE "agent heartbeat stale"

// Looks `id` (`id_length` bytes) up in `segment` with the GET rule's validity: `min_validity`
// seconds, or below 0 the agent's default (min(default, lifetime / 4), at least the serving
// floor). `result` is filled in; its answer is returned.
enum ftr_answer ftr_lookup(const struct ftr_segment *segment, const char *id, size_t id_length, double min_validity,
                           struct ftr_result *result);

// SipHash-2-4 of `length` bytes under (k0, k1): the segment's keyed hash of an id.
uint64_t ftr_siphash24(const void *bytes, size_t length, uint64_t k0, uint64_t k1);

// CLOCK_BOOTTIME in nanoseconds: the clock of the segment's expiries and heartbeat.
uint64_t ftr_boottime_ns(void);

#ifdef __cplusplus
}
#endif

#endif
