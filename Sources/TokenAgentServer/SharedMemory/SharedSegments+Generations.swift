// The segments' generations: the limits on what they may cost, and how a kind's segment is
// opened, grown, replaced (rotation, a change of rules) and reopened under those limits. Every
// function here runs under the segments' lock, on the state it is handed.
import CSharedMemory
import Logging
import TokenAgent
import TokenSegment

extension SharedSegments {
    /// Limits on what the segments may cost.
    public struct Limits: Sendable {
        /// The most bytes every generation that may still be mapped may take together: the
        /// current segments and the retired ones a reader still holds. A kind's retired
        /// generations still held may take at most half of it divided among the kinds.
        public var maxTotalBytes = 512 << 20
        /// The most new generations of one kind in a minute (growth and rotation).
        public var maxGenerationsPerMinute = 60
        /// The window ``maxGenerationsPerMinute`` counts over, seconds (a minute; shorter in tests).
        public var generationWindow: Double = 60
        /// A segment older than this is replaced by a new generation, seconds.
        public var rotationInterval: Double = 900
        /// The slots of a kind's first segment.
        public var initialSlots = 1024

        /// The default limits.
        public init() {}
    }

    /// Retires `writer` (flagged and wiped): from now on only readers may hold it.
    static func retire(_ writer: SegmentWriter, _ state: inout State) {
        writer.retire()
        state.mapped.retire(kind: writer.kind, generation: writer.generation)
    }

    static func open(_ kind: String, in state: inout State, limits: Limits, logger: Logger) {
        do {
            let writer = try SegmentWriter(
                kind: kind,
                generation: state.nextGeneration,
                slotCount: limits.initialSlots,
                slotSize: 1024,
                policy: state.policy
            )
            state.nextGeneration += 1
            state.statistics.generations += 1
            state.writers[kind] = writer
            state.createdAt[kind] = fsm_boottime_ns()
            state.mapped.add(writer)
        } catch {
            logger.error(
                "no shared-memory segment for a kind",
                metadata: ["token_kind": "\(kind)", "error": "\(error)"]
            )
        }
    }

    /// A larger segment for `kind` holding every token of the current one, which is retired;
    /// `nil` (and the current one kept) when a limit forbids it or no slot could hold the token.
    func grow(_ kind: String, _ state: inout State, idLength: Int, tokenLength: Int) -> SegmentWriter? {
        guard let current = state.writers[kind] else { return nil }
        // Slots as small as the largest token seen needs, with 64 bytes to spare (tokens of a kind
        // differ little in length), so a table of short tokens does not keep its first, larger
        // slots; twice as many slots as tokens when full (growth by about 1.5x a time).
        let needed = SegmentLayout.padded(idLength) + SegmentLayout.padded(tokenLength)
        guard SegmentLayout.slotSize(dataBytes: needed) <= SegmentLayout.maxSlotSize else { return nil }
        let slotSize = min(
            SegmentLayout.maxSlotSize,
            SegmentLayout.slotSize(dataBytes: max(current.largestData, needed) + 64)
        )
        let slots = current.hasRoomForAnotherKey ? current.slotCount : max(64, (current.count + 1) * 2)
        return make(kind, &state, from: current, slots: slots, slotSize: slotSize, reason: "growth")
    }

    /// A new generation of `kind` like the current one (rotation, or a change of rules).
    func replace(_ kind: String, _ state: inout State, reason: String) {
        guard let current = state.writers[kind] else { return }
        if make(kind, &state, from: current, slots: current.slotCount, slotSize: current.slotSize, reason: reason)
            == nil
        {
            // No new generation allowed: the readers must still be re-checked, so the kind goes
            // without a segment until a beat can make one. Its tokens stay here meanwhile.
            current.forEachToken { id, token, expiry, lifetime, unixExpiry in
                state.orphans[kind, default: [:]][Array(id)] = Orphan(
                    token: Array(token),
                    expiry: expiry,
                    lifetime: lifetime,
                    unixExpiry: unixExpiry
                )
            }
            Self.retire(current, &state)
            state.writers[kind] = nil
            state.createdAt[kind] = nil
        }
    }

    /// A segment again for `kind`, which a limit left without one, holding the tokens kept for it
    /// meanwhile (those it can take; the rest stay kept here), if the limits allow one now.
    func reopen(_ kind: String, _ state: inout State) {
        let orphans = state.orphans[kind] ?? [:]
        var largest = 0
        for (id, orphan) in orphans {
            largest = max(largest, SegmentLayout.padded(id.count) + SegmentLayout.padded(orphan.token.count))
        }
        let slotSize = min(SegmentLayout.maxSlotSize, SegmentLayout.slotSize(dataBytes: max(largest + 64, 1024 - 48)))
        let slots = max(limits.initialSlots, orphans.count * 2)
        _ = make(kind, &state, from: nil, slots: slots, slotSize: slotSize, reason: "reopen", warn: false)
    }

    /// A new generation of `kind` of `slots` slots of `slotSize` bytes, holding every token of
    /// `current` (which is retired) or, without one, the tokens kept for the kind; `nil` (nothing
    /// changed) when a limit forbids it or it cannot be made. Made and filled under the lock: a
    /// rotation builds its generation beside the current one instead (``startBuild(_:_:)``).
    private func make(
        _ kind: String,
        _ state: inout State,
        from current: SegmentWriter?,
        slots: Int,
        slotSize: Int,
        reason: String,
        warn: Bool = true
    ) -> SegmentWriter? {
        guard let writer = newGeneration(kind, &state, slots: slots, slotSize: slotSize, reason: reason, warn: warn)
        else { return nil }
        // This generation replaces any being built.
        abandonBuild(kind, &state)
        if let current {
            // Sized for every token of `current`: none is left out.
            current.copyTokens(into: writer)
            Self.retire(current, &state)
        } else if let orphans = state.orphans[kind] {
            for (id, orphan) in orphans
            where id.withUnsafeBytes({ idBytes in
                orphan.token.withUnsafeBytes {
                    writer.put(
                        idBytes: idBytes,
                        token: $0,
                        expiry: orphan.expiry,
                        lifetime: orphan.lifetime,
                        unixExpiry: orphan.unixExpiry
                    )
                }
            }) == .stored {
                state.orphans[kind]?.removeValue(forKey: id)
            }
            if state.orphans[kind]?.isEmpty == true { state.orphans[kind] = nil }
        }
        install(writer, kind, &state, reason: reason)
        return writer
    }

    /// A new, empty generation of `kind`, counted against the limits; `nil` when a limit forbids
    /// it or it cannot be made.
    private func newGeneration(
        _ kind: String,
        _ state: inout State,
        slots: Int,
        slotSize: Int,
        reason: String,
        warn: Bool
    ) -> SegmentWriter? {
        let now = fsm_boottime_ns()
        var recent = state.recentGenerations[kind, default: []].filter {
            now &- $0 < UInt64(saturatingNanoseconds: limits.generationWindow)
        }
        // Every generation that may still be mapped counts, the one this replaces included (a
        // reader may keep it), and one being built: the segments never take more than the limit.
        // A kind's retired generations that readers keep may take only their share, so one
        // kind's readers cannot use up the others' room.
        state.mapped.collect()
        let newBytes = SegmentWriter.size(slotCount: slots, slotSize: slotSize)
        let retiredShare = limits.maxTotalBytes / (2 * max(1, state.kinds.count))
        guard recent.count < limits.maxGenerationsPerMinute,
            state.mapped.totalBytes + newBytes <= limits.maxTotalBytes,
            state.mapped.retiredBytes(of: kind) <= retiredShare
        else {
            // A kind without a segment is tried again every beat: it is warned about once, when it
            // lost its segment.
            if warn {
                logger.warning(
                    "shared-memory segment not replaced: limit reached",
                    metadata: ["token_kind": "\(kind)", "reason": "\(reason)", "bytes": "\(newBytes)"]
                )
            }
            state.recentGenerations[kind] = recent
            return nil
        }
        let writer: SegmentWriter
        do {
            writer = try SegmentWriter(
                kind: kind,
                generation: state.nextGeneration,
                slotCount: slots,
                slotSize: slotSize,
                policy: state.policy
            )
        } catch {
            if warn {
                logger.error(
                    "shared-memory segment not made",
                    metadata: ["token_kind": "\(kind)", "error": "\(error)"]
                )
            }
            return nil
        }
        recent.append(now)
        state.recentGenerations[kind] = recent
        state.nextGeneration += 1
        state.statistics.generations += 1
        state.mapped.add(writer)
        return writer
    }

    /// Makes `writer` the kind's segment.
    private func install(_ writer: SegmentWriter, _ kind: String, _ state: inout State, reason: String) {
        state.writers[kind] = writer
        state.createdAt[kind] = fsm_boottime_ns()
        logger.debug(
            "shared-memory segment replaced",
            metadata: [
                "token_kind": "\(kind)", "reason": "\(reason)", "generation": "\(writer.generation)",
                "bytes": "\(writer.size)",
            ]
        )
    }

    // MARK: Generations built beside the current one

    /// Starts building `kind`'s next generation beside its current one (a rotation): from now on
    /// every change to the kind goes to both, and ``advanceBuilds(_:batch:)`` copies the current
    /// one's tokens into it a batch at a time, the lock released between batches, then switches
    /// to it. `false` when a limit forbids a new generation now.
    func startBuild(_ kind: String, _ state: inout State) -> Bool {
        guard state.building[kind] == nil, let current = state.writers[kind] else { return false }
        guard
            let writer = newGeneration(
                kind,
                &state,
                slots: current.slotCount,
                slotSize: current.slotSize,
                reason: "rotation",
                warn: true
            )
        else { return false }
        state.building[kind] = Build(writer: writer, nextSlot: 0)
        return true
    }

    /// Copies up to `batch` slots' tokens into each generation being built; a build that has
    /// copied every slot becomes its kind's segment, and the one it replaces is retired. Whether
    /// any build has slots left.
    func advanceBuilds(_ state: inout State, batch: Int) -> Bool {
        state.wiping.removeAll { !$0.wipe(count: batch) }
        var more = !state.wiping.isEmpty
        for (kind, build) in state.building {
            guard let current = state.writers[kind] else {
                abandonBuild(kind, &state)
                continue
            }
            var stored = true
            let next = current.copyTokens(into: build.writer, fromSlot: build.nextSlot, count: batch, stored: &stored)
            if !stored {
                // It could not take a token the current one holds (it was sized like it, so only a
                // change since could do this): the current one stays, the next beat tries again.
                abandonBuild(kind, &state)
            } else if let next {
                state.building[kind]?.nextSlot = next
                more = true
            } else {
                // Readers of the current one ask for the new one from its flag on; its slots are
                // zeroed a batch at a time from the next call.
                state.building[kind] = nil
                current.markRetired()
                state.mapped.retire(kind: kind, generation: current.generation)
                state.wiping.append(current)
                install(build.writer, kind, &state, reason: "rotation")
                more = true
            }
        }
        return more
    }

    /// Drops the generation being built for `kind`, if any (retired: it was never offered).
    func abandonBuild(_ kind: String, _ state: inout State) {
        guard let build = state.building.removeValue(forKey: kind) else { return }
        Self.retire(build.writer, &state)
    }
}
