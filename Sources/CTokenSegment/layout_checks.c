// The segment header's own arithmetic, checked when the package builds: the constants of
// fleet_tokend_segment.h must describe one consistent layout. (A C target needs a source file;
// this one holds only these checks, no code.)
#include "fleet_tokend_segment.h"

_Static_assert(FTS_HEADER_INDEX_COUNT * 8 < FTS_HEADER_SIZE, "the header's words fit the header");
_Static_assert(FTS_HEADER_KIND + FTS_KIND_WORDS <= FTS_HEADER_INDEX_COUNT, "the kind's words end before the index count");
_Static_assert(FTS_KIND_WORDS * 8 == FTS_MAX_KIND_LENGTH, "the kind's words hold the longest kind");
_Static_assert(FTS_SLOT_DATA * 8 == FTS_SLOT_HEADER_SIZE, "a slot's data follows its header words");
_Static_assert(FTS_HEADER_SIZE % FTS_TABLE_ALIGNMENT == 0, "the index starts aligned");
_Static_assert(FTS_TABLE_OFFSET(1) == 320 && FTS_TABLE_OFFSET(8) == 320 && FTS_TABLE_OFFSET(9) == 384,
               "the table starts at the next multiple of 64 bytes after the index");
_Static_assert(FTS_MIN_SLOT_SIZE % 64 == 0 && FTS_MAX_SLOT_SIZE % 64 == 0, "the agent's slot sizes");
_Static_assert(FTS_MAX_SLOT_SIZE - FTS_SLOT_HEADER_SIZE < (1ULL << (64 - FTS_META_TOKEN_LENGTH_SHIFT)),
               "a token length fits its bits");
_Static_assert(FTS_INDEX_REMOVED == FTS_INDEX_SLOT_MASK && FTS_COUNT_LIMIT <= FTS_INDEX_REMOVED,
               "slot numbers plus one stay below the removed marker");
_Static_assert((FTS_INDEX_HASH_MASK & FTS_INDEX_SLOT_MASK) == 0 && (FTS_INDEX_HASH_MASK | FTS_INDEX_SLOT_MASK) == ~0ULL,
               "an index entry is its hash bits and its slot bits");
