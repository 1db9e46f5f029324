#ifndef FLEET_TOKEND_SEGMENT_H
#define FLEET_TOKEND_SEGMENT_H

// The byte layout of fleet-tokend's shared-memory token segments: the one contract between the
// agent (the only writer, Sources/TokenSegment through the CTokenSegment module) and every reader
// (FleetTokenClient, libfleet-tokend-reader, a reader in any other language). docs/SHM.md tells
// the protocol these bytes serve: how a reader finds, maps, checks and reads a segment, the
// seqlock, the heartbeat and retirement.
//
// A segment is one sealed memory file: a header of FTS_HEADER_SIZE bytes, an index of
// `index count` one-word entries from byte FTS_HEADER_SIZE, then `slot count` slots of `slot
// size` bytes each from the table offset. Every field is a little-endian 64-bit word at an
// 8-byte-aligned offset, loaded and stored atomically. Word indices below count 64-bit words
// from the start of the segment (FTS_HEADER_*) or of a slot (FTS_SLOT_*).
//
// Integer constants only (no code, no types), so that C readers and Swift alike see them as
// compile-time constants.

// The header's first word: the bytes "FTKSHM01".
#define FTS_MAGIC 0x31304D48534B5446ULL
// The layout version the agent writes and readers read. A segment of another version is refused.
#define FTS_VERSION 2
// The header's size in bytes; the index starts here.
#define FTS_HEADER_SIZE 256

// Header words.
#define FTS_HEADER_MAGIC 0            // FTS_MAGIC
#define FTS_HEADER_VERSION 1          // the version (low 32 bits) and the header size (high 32 bits)
#define FTS_HEADER_GENERATION 2       // the segment's generation: a kind's next segment has a higher one
#define FTS_HEADER_FLAGS 3            // FTS_FLAG_RETIRED
#define FTS_HEADER_HEARTBEAT 4        // CLOCK_BOOTTIME nanoseconds of the writer's last beat (every second)
#define FTS_HEADER_SEED0 5            // the SipHash-2-4 key's first word
#define FTS_HEADER_SEED1 6            // the SipHash-2-4 key's second word
#define FTS_HEADER_SLOTS 7            // the slot count (low 32 bits) and the slot size in bytes (high 32 bits)
#define FTS_HEADER_TABLE_OFFSET 8     // where slot 0 starts, bytes: FTS_TABLE_OFFSET(index count)
#define FTS_HEADER_SEGMENT_SIZE 9     // the segment's size, bytes: table offset + slot count * slot size
#define FTS_HEADER_MAX_PROBE 10       // the longest probe sequence (index entries) the writer has made
#define FTS_HEADER_MIN_VALIDITY 11    // the agent's default minimum validity, nanoseconds
#define FTS_HEADER_SERVING_FLOOR 12   // no token with less left is served, nanoseconds
#define FTS_HEADER_IDLE_TIMEOUT 13    // keys not read for this long stop being refreshed, nanoseconds
#define FTS_HEADER_KIND_LENGTH 14     // the kind's name's length in bytes (at most FTS_MAX_KIND_LENGTH)
#define FTS_HEADER_KIND 15            // the kind's name, zero-padded, in FTS_KIND_WORDS words
#define FTS_HEADER_INDEX_COUNT 19     // the index's entries (at least 1, below FTS_COUNT_LIMIT)
// Words 20 to 31 are reserved (zero).

#define FTS_KIND_WORDS 4
#define FTS_MAX_KIND_LENGTH 32

// The version word: FTS_VERSION | FTS_HEADER_SIZE << FTS_HEADER_SIZE_SHIFT.
#define FTS_VERSION_MASK 0xffffffffULL
#define FTS_HEADER_SIZE_SHIFT 32
// The slots word: slot count | slot size << FTS_SLOT_SIZE_SHIFT.
#define FTS_SLOT_COUNT_MASK 0xffffffffULL
#define FTS_SLOT_SIZE_SHIFT 32

// The flags word's bit the writer sets (sequentially consistent) when it retires the segment.
#define FTS_FLAG_RETIRED 1ULL

// Slot and index counts are below 2^31: slot numbers plus one, and FTS_INDEX_REMOVED, fit 32 bits.
#define FTS_COUNT_LIMIT 0x80000000ULL

// The slot table starts after the index at the next multiple of FTS_TABLE_ALIGNMENT bytes.
#define FTS_TABLE_ALIGNMENT 64
#define FTS_TABLE_OFFSET(index_count)                                                                  \
    (((unsigned long long)FTS_HEADER_SIZE + 8ULL * (unsigned long long)(index_count) +                 \
      (FTS_TABLE_ALIGNMENT - 1)) & ~(unsigned long long)(FTS_TABLE_ALIGNMENT - 1))

// Index entries, one word each from byte FTS_HEADER_SIZE. Never used: a probe stops there.
// Removed: the low 32 bits are FTS_INDEX_REMOVED, and a probe goes on past it. Any other entry
// is live: the high 32 bits of the id's hash (FTS_INDEX_HASH_MASK) and its slot number plus one
// (FTS_INDEX_SLOT_MASK).
#define FTS_INDEX_EMPTY 0ULL
#define FTS_INDEX_REMOVED 0xffffffffULL
#define FTS_INDEX_SLOT_MASK 0xffffffffULL
#define FTS_INDEX_HASH_MASK 0xffffffff00000000ULL

// The most index entries a reader probes for one id, whatever the max probe word says.
#define FTS_PROBE_CAP 4096

// Slot words.
#define FTS_SLOT_SEQUENCE 0           // the seqlock's sequence: even while stable, odd while being written
#define FTS_SLOT_META 1               // state, id length and token length (FTS_META_*)
#define FTS_SLOT_HASH 2               // the id's SipHash-2-4 under the header's key
#define FTS_SLOT_EXPIRY 3             // the token's expiry, CLOCK_BOOTTIME nanoseconds
#define FTS_SLOT_LIFETIME 4           // the token's lifetime as fetched, nanoseconds
#define FTS_SLOT_UNIX_EXPIRY 5        // the token's expiry in Unix seconds (signed), as GET reports it
#define FTS_SLOT_DATA 6               // the id's bytes zero-padded to a word, then the token's bytes

// The bytes of a slot before its data.
#define FTS_SLOT_HEADER_SIZE 48
// The slot sizes the agent makes (multiples of 64 bytes); a reader accepts any multiple of 8 above
// FTS_SLOT_HEADER_SIZE up to FTS_MAX_SLOT_SIZE.
#define FTS_MIN_SLOT_SIZE 256
#define FTS_MAX_SLOT_SIZE 16384

// The meta word: state (bits 0-7), id length (bits 16-31), token length (bits 32-63).
#define FTS_META_STATE_MASK 0xffULL
#define FTS_META_ID_LENGTH_SHIFT 16
#define FTS_META_ID_LENGTH_MASK 0xffffULL
#define FTS_META_TOKEN_LENGTH_SHIFT 32

// Slot states: holding nothing, or a token.
#define FTS_STATE_EMPTY 0ULL
#define FTS_STATE_LIVE 1ULL

// How many times a reader copies a slot under its sequence before it gives up (the slot kept
// changing) and asks the agent on its socket instead.
#define FTS_COPY_ATTEMPTS 5

// A heartbeat older than this means the writer is gone: nanoseconds.
#define FTS_STALE_HEARTBEAT_NS 3000000000ULL

// What the agent ever serves, for readers to check what a slot holds: a token is 1 to
// FTS_MAX_TOKEN_LENGTH bytes of printable ASCII without spaces (0x21 to 0x7E), and its Unix
// expiry lies from FTS_EXPIRY_SLACK_S before now to FTS_MAX_LIFETIME_S + FTS_EXPIRY_SLACK_S after
// (the agent keeps a token at most 30 days; a day either side for wall-clock steps).
#define FTS_MAX_TOKEN_LENGTH 16384
#define FTS_MAX_LIFETIME_S 2592000LL
#define FTS_EXPIRY_SLACK_S 86400LL

#endif
