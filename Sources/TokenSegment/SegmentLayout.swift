/// The byte layout of a token segment, shared by the agent (the one writer) and every reader.
///
/// A segment is one memory file: a 256-byte header, then (layout 2) an index of `indexCount`
/// one-word entries, then a table of `slotCount` slots of `slotSize` bytes each; layout 1 has no
/// index, its table starts after the header and is probed itself. Every field is a little-endian
/// 64-bit word read and written with atomic loads and stores, so readers in any language can
/// follow it; docs/SHM.md is the language-neutral description, and `Examples/shm-reader` a C
/// reader.
public enum SegmentLayout {
    /// The header's first word: the bytes `FTKSHM01`.
    public static let magic: UInt64 = 0x3130_4D48_534B_5446
    /// The layout version the agent writes.
    public static let version: UInt32 = 2
    /// The layout versions readers read.
    public static let readableVersions: [UInt32] = [1, 2]
    /// The header's size in bytes; the table starts here.
    public static let headerSize = 256
    /// The bytes of a slot before its data: six words.
    public static let slotHeaderSize = 48
    /// The smallest and largest slot sizes the agent makes (multiples of 64 bytes).
    public static let minSlotSize = 256
    public static let maxSlotSize = 16384
    /// The most slots a reader probes for one key, whatever the header says.
    public static let probeCap = 4096
    /// A heartbeat older than this means the writer is gone: nanoseconds.
    public static let staleHeartbeatNanoseconds: UInt64 = 3_000_000_000

    /// Header words (indices of 64-bit words from the segment's start).
    public enum Header {
        /// ``SegmentLayout/magic``.
        public static let magic = 0
        /// The layout version (low 32 bits) and the header size (high 32 bits).
        public static let versionAndHeaderSize = 1
        /// The segment's generation: a new segment of a kind gets a higher one.
        public static let generation = 2
        /// Flags: ``SegmentLayout/retiredFlag``.
        public static let flags = 3
        /// `CLOCK_BOOTTIME` nanoseconds of the writer's last beat (every second).
        public static let heartbeat = 4
        /// The keyed hash's two 64-bit keys (SipHash-2-4).
        public static let seed0 = 5
        public static let seed1 = 6
        /// The slot count (low 32 bits) and the slot size (high 32 bits, a multiple of 8).
        public static let slotCountAndSize = 7
        /// The table's offset from the segment's start, bytes.
        public static let tableOffset = 8
        /// The segment's size, bytes.
        public static let segmentSize = 9
        /// The longest probe sequence the writer has made: readers stop after it.
        public static let maxProbe = 10
        /// The agent's default minimum validity, nanoseconds.
        public static let minValidity = 11
        /// The agent's serving floor: no token with less left is served, nanoseconds.
        public static let servingFloor = 12
        /// The agent's idle time-out (keys not read for this long stop being refreshed), nanoseconds.
        public static let idleTimeout = 13
        /// The kind's name: its length in bytes, then up to 32 bytes in the next four words.
        public static let kindLength = 14
        public static let kindBytes = 15
        /// Layout 2: the index's entries.
        public static let indexCount = 19
    }

    /// Layout 2: index entries, one word each, from the end of the header.
    public enum Index {
        /// Never used: a probe stops here.
        public static let empty: UInt64 = 0
        /// The low 32 bits of a removed entry (a probe goes on past it); the writer stores this.
        public static let removed: UInt64 = 0xffff_ffff
        /// The most slots or entries a layout 2 segment may have (slot numbers plus one, and the
        /// removed marker, fit 32 bits).
        public static let maxCount = 1 << 31 - 1

        /// The entry of a live key: the high 32 bits of its hash, and its slot number plus one.
        @inlinable
        public static func entry(hash: UInt64, slot: Int) -> UInt64 {
            hash & 0xffff_ffff_0000_0000 | UInt64(slot + 1)
        }

        /// Whether `entry` names a slot (neither never used nor removed).
        @inlinable
        public static func isLive(_ entry: UInt64) -> Bool {
            entry != empty && entry & 0xffff_ffff != removed
        }

        /// The slot a live entry names.
        @inlinable
        public static func slot(of entry: UInt64) -> Int { Int(entry & 0xffff_ffff) - 1 }

        /// Whether a live entry may be `hash`'s (its high 32 bits match).
        @inlinable
        public static func matches(_ entry: UInt64, hash: UInt64) -> Bool {
            entry >> 32 == hash >> 32
        }
    }

    /// Layout 2: where the slot table starts after an index of `indexCount` entries (a multiple
    /// of 64 bytes).
    @inlinable
    public static func tableOffset(indexCount: Int) -> Int { (headerSize + 8 * indexCount + 63) & ~63 }

    /// Slot words (indices of 64-bit words from the slot's start).
    public enum Slot {
        /// The sequence counter: odd while the writer changes the slot.
        public static let sequence = 0
        /// The state (bits 0-7), the id's length (bits 16-31) and the token's length (bits 32-63).
        public static let meta = 1
        /// The id's keyed hash.
        public static let hash = 2
        /// The token's expiry, `CLOCK_BOOTTIME` nanoseconds.
        public static let expiry = 3
        /// The token's lifetime as fetched, nanoseconds.
        public static let lifetime = 4
        /// The token's expiry in Unix seconds (signed), as the socket reports it.
        public static let unixExpiry = 5
        /// The data: the id's bytes, zero-padded to a word, then the token's bytes.
        public static let data = 6
    }

    /// Slot states.
    public enum State {
        /// Layout 1: never used, a probe stops here. Layout 2: holds nothing.
        public static let empty: UInt64 = 0
        /// Holds a token.
        public static let live: UInt64 = 1
        /// Layout 1: held one, a probe goes on past it.
        public static let tombstone: UInt64 = 2
    }

    /// The flag a writer sets when it stops writing a segment; readers ask for a new one.
    public static let retiredFlag: UInt64 = 1

    /// The meta word of a slot.
    @inlinable
    public static func meta(state: UInt64, idLength: Int, tokenLength: Int) -> UInt64 {
        state | UInt64(idLength) << 16 | UInt64(tokenLength) << 32
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

    /// The first place of `hash`'s probe sequence in a table of `slotCount` places (layout 2: index
    /// entries; layout 1: slots): the high 64 bits of `hash * slotCount` (a multiply-shift, so a
    /// table may have any number of places).
    @inlinable
    public static func home(of hash: UInt64, slotCount: Int) -> Int {
        Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(slotCount)).high)
    }

    /// The slot after `slot` in a table of `slotCount` slots, wrapping to 0.
    @inlinable
    public static func next(_ slot: Int, slotCount: Int) -> Int { slot + 1 == slotCount ? 0 : slot + 1 }
}
