// Copying a segment's tokens into the next generation: all at once, or a batch of slots at a
// time while the current one goes on serving (docs/SHM.md, "Generations").
extension SegmentWriter {
    /// Every token held, for copying into a new segment: the id's bytes and the token's bytes
    /// (both valid only during the call), expiry, lifetime and Unix expiry. No `String` is made.
    public func forEachToken(
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UInt64, UInt64, Int64) -> Void
    ) {
        _ = forEachToken(inSlots: 0..<usedSlots) { id, token, expiry, lifetime, unixExpiry in
            body(id, token, expiry, lifetime, unixExpiry)
            return true
        }
    }

    /// Copies every token held into `other` (a new generation, which its owner sized to take
    /// them all).
    public func copyTokens(into other: SegmentWriter) {
        forEachToken { id, token, expiry, lifetime, unixExpiry in
            other.put(idBytes: id, token: token, expiry: expiry, lifetime: lifetime, unixExpiry: unixExpiry)
        }
    }

    /// Copies the tokens of up to `count` slots from `first` on into `other`, for a new
    /// generation built a batch at a time; the slot to go on from, or `nil` when every slot ever
    /// used has been copied. `false` in `stored` when `other` refused one (full or too small).
    public func copyTokens(into other: SegmentWriter, fromSlot first: Int, count: Int, stored: inout Bool) -> Int? {
        let end = first + min(count, max(0, usedSlots - first))
        stored = forEachToken(inSlots: first..<max(first, end)) { id, token, expiry, lifetime, unixExpiry in
            other.put(idBytes: id, token: token, expiry: expiry, lifetime: lifetime, unixExpiry: unixExpiry) == .stored
        }
        return stored && end < usedSlots ? end : nil
    }

    /// Calls `body` with the token of every live slot in `slots` (as ``forEachToken(_:)``), until
    /// it returns `false`; whether it never did.
    private func forEachToken(
        inSlots slots: Range<Int>,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UInt64, UInt64, Int64) -> Bool
    ) -> Bool {
        for slot in slots {
            let slotWords = self.slotWords(slot)
            let meta = slotWords.load(SegmentLayout.Slot.meta)
            let (state, idLength, tokenLength) = SegmentLayout.parts(ofMeta: meta)
            guard state == SegmentLayout.State.live else { continue }
            let dataStart = UnsafeRawPointer(slotAddress(slot) + SegmentLayout.slotHeaderSize)
            let going = body(
                UnsafeRawBufferPointer(start: dataStart, count: idLength),
                UnsafeRawBufferPointer(start: dataStart + SegmentLayout.padded(idLength), count: tokenLength),
                slotWords.load(SegmentLayout.Slot.expiry),
                slotWords.load(SegmentLayout.Slot.lifetime),
                Int64(bitPattern: slotWords.load(SegmentLayout.Slot.unixExpiry))
            )
            if !going { return false }
        }
        return true
    }
}
