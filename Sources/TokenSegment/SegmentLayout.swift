import CTokenSegment

/// The byte layout of a token segment, shared by the agent (the one writer) and every reader:
/// the constants of `Sources/CTokenSegment/include/fleet_tokend_segment.h`, the one place the
/// layout is written down, which the C reader library includes too (docs/SHM.md tells the
/// protocol). This enum gives them Swift names and types, and adds the arithmetic on them.
///
/// A segment is one memory file: a 256-byte header, then an index of `indexCount` one-word
/// entries, then a table of `slotCount` slots of `slotSize` bytes each. Every field is a
/// little-endian 64-bit word read and written with atomic loads and stores. Every constant is an
/// inlinable computed property over a C integer literal, so it folds to that literal wherever it
/// is used (the read path loads no global and calls nothing for it).
public enum SegmentLayout {
    /// The header's first word: the bytes `FTKSHM01`.
    @inlinable public static var magic: UInt64 { UInt64(FTS_MAGIC) }
    /// The layout version the agent writes and readers read (a segment of another is refused).
    @inlinable public static var version: UInt32 { UInt32(FTS_VERSION) }
    /// The header's size in bytes; the index starts here.
    @inlinable public static var headerSize: Int { Int(FTS_HEADER_SIZE) }
    /// The bytes of a slot before its data: six words.
    @inlinable public static var slotHeaderSize: Int { Int(FTS_SLOT_HEADER_SIZE) }
    /// The smallest and largest slot sizes the agent makes (multiples of 64 bytes).
    @inlinable public static var minSlotSize: Int { Int(FTS_MIN_SLOT_SIZE) }
    @inlinable public static var maxSlotSize: Int { Int(FTS_MAX_SLOT_SIZE) }
    /// The most index entries a reader probes for one key, whatever the header says.
    @inlinable public static var probeCap: Int { Int(FTS_PROBE_CAP) }
    /// A heartbeat older than this means the writer is gone: nanoseconds.
    @inlinable public static var staleHeartbeatNanoseconds: UInt64 { UInt64(FTS_STALE_HEARTBEAT_NS) }
    /// How many times a reader copies a slot under its sequence before it gives up.
    @inlinable public static var copyAttempts: Int { Int(FTS_COPY_ATTEMPTS) }
    /// The longest kind name a header holds, bytes.
    @inlinable public static var maxKindLength: Int { Int(FTS_MAX_KIND_LENGTH) }

    /// Header words (indices of 64-bit words from the segment's start).
    public enum Header {
        /// ``SegmentLayout/magic``.
        @inlinable public static var magic: Int { Int(FTS_HEADER_MAGIC) }
        /// The layout version (low 32 bits) and the header size (high 32 bits).
        @inlinable public static var versionAndHeaderSize: Int { Int(FTS_HEADER_VERSION) }
        /// The segment's generation: a new segment of a kind gets a higher one.
        @inlinable public static var generation: Int { Int(FTS_HEADER_GENERATION) }
        /// Flags: ``SegmentLayout/retiredFlag``.
        @inlinable public static var flags: Int { Int(FTS_HEADER_FLAGS) }
        /// `CLOCK_BOOTTIME` nanoseconds of the writer's last beat (every second).
        @inlinable public static var heartbeat: Int { Int(FTS_HEADER_HEARTBEAT) }
        /// The keyed hash's two 64-bit keys (SipHash-2-4).
        @inlinable public static var seed0: Int { Int(FTS_HEADER_SEED0) }
        @inlinable public static var seed1: Int { Int(FTS_HEADER_SEED1) }
        /// The slot count (low 32 bits) and the slot size (high 32 bits, a multiple of 8).
        @inlinable public static var slotCountAndSize: Int { Int(FTS_HEADER_SLOTS) }
        /// The table's offset from the segment's start, bytes.
        @inlinable public static var tableOffset: Int { Int(FTS_HEADER_TABLE_OFFSET) }
        /// The segment's size, bytes.
        @inlinable public static var segmentSize: Int { Int(FTS_HEADER_SEGMENT_SIZE) }
        /// The longest probe sequence the writer has made: readers stop after it.
        @inlinable public static var maxProbe: Int { Int(FTS_HEADER_MAX_PROBE) }
        /// The agent's default minimum validity, nanoseconds.
        @inlinable public static var minValidity: Int { Int(FTS_HEADER_MIN_VALIDITY) }
        /// The agent's serving floor: no token with less left is served, nanoseconds.
        @inlinable public static var servingFloor: Int { Int(FTS_HEADER_SERVING_FLOOR) }
        /// The agent's idle time-out (keys not read for this long stop being refreshed), nanoseconds.
        @inlinable public static var idleTimeout: Int { Int(FTS_HEADER_IDLE_TIMEOUT) }
        /// The kind's name: its length in bytes, then up to 32 bytes in the next four words.
        @inlinable public static var kindLength: Int { Int(FTS_HEADER_KIND_LENGTH) }
        @inlinable public static var kindBytes: Int { Int(FTS_HEADER_KIND) }
        /// The index's entries.
        @inlinable public static var indexCount: Int { Int(FTS_HEADER_INDEX_COUNT) }
    }

    /// Index entries, one word each, from the end of the header.
    public enum Index {
        /// Never used: a probe stops here.
        @inlinable public static var empty: UInt64 { UInt64(FTS_INDEX_EMPTY) }
        /// The low 32 bits of a removed entry (a probe goes on past it); the writer stores this.
        @inlinable public static var removed: UInt64 { UInt64(FTS_INDEX_REMOVED) }
        /// The most slots or entries a segment may have (slot numbers plus one, and the removed
        /// marker, fit 32 bits).
        @inlinable public static var maxCount: Int { Int(FTS_COUNT_LIMIT) - 1 }

        /// The entry of a live key: the high 32 bits of its hash, and its slot number plus one.
        @inlinable
        public static func entry(hash: UInt64, slot: Int) -> UInt64 {
            hash & UInt64(FTS_INDEX_HASH_MASK) | UInt64(slot + 1)
        }

        /// Whether `entry` is removed (its low 32 bits are ``removed``).
        @inlinable
        public static func isRemoved(_ entry: UInt64) -> Bool { entry & UInt64(FTS_INDEX_SLOT_MASK) == removed }

        /// Whether `entry` names a slot (neither never used nor removed).
        @inlinable
        public static func isLive(_ entry: UInt64) -> Bool {
            entry != empty && entry & UInt64(FTS_INDEX_SLOT_MASK) != removed
        }

        /// The slot a live entry names.
        @inlinable
        public static func slot(of entry: UInt64) -> Int { Int(entry & UInt64(FTS_INDEX_SLOT_MASK)) - 1 }

        /// Whether a live entry may be `hash`'s (its high 32 bits match).
        @inlinable
        public static func matches(_ entry: UInt64, hash: UInt64) -> Bool {
            entry & UInt64(FTS_INDEX_HASH_MASK) == hash & UInt64(FTS_INDEX_HASH_MASK)
        }
    }

    /// Where the slot table starts after an index of `indexCount` entries (a multiple of 64 bytes).
    @inlinable
    public static func tableOffset(indexCount: Int) -> Int {
        let alignment = Int(FTS_TABLE_ALIGNMENT)
        return (headerSize + 8 * indexCount + alignment - 1) & ~(alignment - 1)
    }

    /// Slot words (indices of 64-bit words from the slot's start).
    public enum Slot {
        /// The sequence counter: odd while the writer changes the slot.
        @inlinable public static var sequence: Int { Int(FTS_SLOT_SEQUENCE) }
        /// The state (bits 0-7), the id's length (bits 16-31) and the token's length (bits 32-63).
        @inlinable public static var meta: Int { Int(FTS_SLOT_META) }
        /// The id's keyed hash.
        @inlinable public static var hash: Int { Int(FTS_SLOT_HASH) }
        /// The token's expiry, `CLOCK_BOOTTIME` nanoseconds.
        @inlinable public static var expiry: Int { Int(FTS_SLOT_EXPIRY) }
        /// The token's lifetime as fetched, nanoseconds.
        @inlinable public static var lifetime: Int { Int(FTS_SLOT_LIFETIME) }
        /// The token's expiry in Unix seconds (signed), as the socket reports it.
        @inlinable public static var unixExpiry: Int { Int(FTS_SLOT_UNIX_EXPIRY) }
        /// The data: the id's bytes, zero-padded to a word, then the token's bytes.
        @inlinable public static var data: Int { Int(FTS_SLOT_DATA) }
    }

    /// Slot states.
    public enum State {
        /// Holds nothing.
        @inlinable public static var empty: UInt64 { UInt64(FTS_STATE_EMPTY) }
        /// Holds a token.
        @inlinable public static var live: UInt64 { UInt64(FTS_STATE_LIVE) }
    }

    /// The flag a writer sets when it stops writing a segment; readers ask for a new one.
    @inlinable public static var retiredFlag: UInt64 { UInt64(FTS_FLAG_RETIRED) }

    /// The meta word of a slot.
    @inlinable
    public static func meta(state: UInt64, idLength: Int, tokenLength: Int) -> UInt64 {
        state | UInt64(idLength) << UInt64(FTS_META_ID_LENGTH_SHIFT)
            | UInt64(tokenLength) << UInt64(FTS_META_TOKEN_LENGTH_SHIFT)
    }

    /// A meta word's parts: the state, the id's length and the token's length.
    @inlinable
    public static func parts(ofMeta meta: UInt64) -> (state: UInt64, idLength: Int, tokenLength: Int) {
        (
            meta & UInt64(FTS_META_STATE_MASK),
            Int(meta >> UInt64(FTS_META_ID_LENGTH_SHIFT) & UInt64(FTS_META_ID_LENGTH_MASK)),
            Int(meta >> UInt64(FTS_META_TOKEN_LENGTH_SHIFT))
        )
    }

    /// The header's version word: the version and the header size.
    @inlinable
    public static var versionWord: UInt64 {
        UInt64(version) | UInt64(headerSize) << UInt64(FTS_HEADER_SIZE_SHIFT)
    }

    /// A slots word's parts: the slot count and the slot size.
    @inlinable
    public static func parts(ofSlots word: UInt64) -> (count: Int, size: Int) {
        (Int(word & UInt64(FTS_SLOT_COUNT_MASK)), Int(word >> UInt64(FTS_SLOT_SIZE_SHIFT)))
    }

    /// The slots word of `count` slots of `size` bytes.
    @inlinable
    public static func slotsWord(count: Int, size: Int) -> UInt64 {
        UInt64(count) | UInt64(size) << UInt64(FTS_SLOT_SIZE_SHIFT)
    }

    /// Bytes `count` bytes take rounded up to whole words.
    @inlinable
    public static func padded(_ count: Int) -> Int { (count + 7) & ~7 }

    /// The slot size (a multiple of 64, at least ``minSlotSize``) that holds `dataBytes` bytes of
    /// data (the id and the token, each padded to a word).
    public static func slotSize(dataBytes: Int) -> Int {
        max(minSlotSize, (slotHeaderSize + dataBytes + 63) & ~63)
    }

    /// The slot size that holds an id of `idLength` and a token of `tokenLength`.
    public static func slotSize(idLength: Int, tokenLength: Int) -> Int {
        slotSize(dataBytes: padded(idLength) + padded(tokenLength))
    }

    /// The first place of `hash`'s probe sequence in an index of `slotCount` entries: the high 64
    /// bits of `hash * slotCount` (a multiply-shift, so an index may have any number of entries).
    @inlinable
    public static func home(of hash: UInt64, slotCount: Int) -> Int {
        Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(slotCount)).high)
    }

    /// The entry after `slot` in an index of `slotCount` entries, wrapping to 0.
    @inlinable
    public static func next(_ slot: Int, slotCount: Int) -> Int { slot + 1 == slotCount ? 0 : slot + 1 }
}
