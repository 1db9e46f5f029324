// The segments' generations: the limits on what they may cost, and how a kind's segment is
// opened, grown, replaced (rotation, a change of rules) and reopened under those limits. Every
// function here runs under the kind's lock, on the state it is handed; those that count a
// generation against the limits take the shared lock inside it.
import CSharedMemory
import Logging
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
    func retire(_ writer: SegmentWriter) {
        writer.retire()
        shared.withLock { $0.mapped.retire(kind: writer.kind, generation: writer.generation) }
    }

    /// The kind's first segment.
    func open(_ kind: String, _ state: inout KindState) {
        guard
            let writer = newGeneration(
                kind,
                policy: state.policy,
                slots: limits.initialSlots,
                slotSize: 1024,
                reason: "open",
                limited: false
            )
        else { return }
        install(writer, kind, &state, reason: "open")
    }

    /// The slot size for tokens whose id and token take at most `dataBytes` (each padded to a
    /// word), with 64 bytes to spare (tokens of a kind differ little in length), so a table of
    /// short tokens does not keep its first, larger slots.
    private static func slotSize(forData dataBytes: Int) -> Int {
        min(SegmentLayout.maxSlotSize, SegmentLayout.slotSize(dataBytes: dataBytes + 64))
    }

    /// A larger segment for `kind` holding every token of the current one, which is retired,
    /// made and filled under the kind's lock (the growth a store that finds no room needs at
    /// once); `nil` (and the current one kept) when a limit forbids it or no slot could hold the
    /// token. A segment three quarters full grows beside itself first (``startGrowthIfFilling``).
    func grow(_ kind: String, _ state: inout KindState, idLength: Int, tokenLength: Int) -> SegmentWriter? {
        guard let current = state.writer else { return nil }
        let needed = SegmentLayout.padded(idLength) + SegmentLayout.padded(tokenLength)
        guard SegmentLayout.slotSize(dataBytes: needed) <= SegmentLayout.maxSlotSize else { return nil }
        let slotSize = Self.slotSize(forData: max(current.largestData, needed))
        // Twice as many slots as tokens when full (growth by about 1.5x a time).
        let slots = current.hasRoomForAnotherKey ? current.slotCount : max(64, (current.count + 1) * 2)
        return make(kind, &state, from: current, slots: slots, slotSize: slotSize, reason: "growth")
    }

    /// Room in one step for `tokens` more tokens of `kind` (a cache taken over at start): a
    /// generation sized as ``grow(_:_:idLength:tokenLength:)`` would size it once they are all in
    /// (twice as many slots as tokens), holding the current one's, made now unless the current
    /// one has the slots already. Growing token by token instead retires a generation at each
    /// step, faster than the kernel frees them, so the kind's share of the limit runs out and the
    /// rest of the tokens are left out of shared memory. Nothing changes when a limit forbids it.
    func reserve(_ kind: String, _ state: inout KindState, tokens: Int, idLength: Int, tokenLength: Int) {
        guard let current = state.writer else { return }
        let needed = min(
            SegmentLayout.padded(idLength) + SegmentLayout.padded(tokenLength),
            SegmentLayout.maxSlotSize
        )
        let slotSize = Self.slotSize(forData: max(current.largestData, needed))
        let slots = (current.count + tokens) * 2
        guard slots > current.slotCount || slotSize > current.slotSize else { return }
        _ = make(
            kind,
            &state,
            from: current,
            slots: max(slots, current.slotCount),
            slotSize: slotSize,
            reason: "growth"
        )
    }

    /// A new generation of `kind` like the current one (rotation, or a change of rules).
    func replace(_ kind: String, _ state: inout KindState, reason: String) {
        guard let current = state.writer else { return }
        if make(kind, &state, from: current, slots: current.slotCount, slotSize: current.slotSize, reason: reason)
            == nil
        {
            // No new generation allowed: the readers must still be re-checked, so the kind goes
            // without a segment until a beat can make one. Its tokens stay here meanwhile.
            current.forEachToken { id, token, expiry, lifetime, unixExpiry in
                state.orphans[Array(id)] = Orphan(
                    token: Array(token),
                    expiry: expiry,
                    lifetime: lifetime,
                    unixExpiry: unixExpiry
                )
            }
            retire(current)
            state.writer = nil
            state.createdAt = 0
        }
    }

    /// A segment again for `kind`, which a limit left without one, holding the tokens kept for it
    /// meanwhile (those it can take; the rest stay kept here), if the limits allow one now.
    func reopen(_ kind: String, _ state: inout KindState) {
        var largest = 0
        for (id, orphan) in state.orphans {
            largest = max(largest, SegmentLayout.padded(id.count) + SegmentLayout.padded(orphan.token.count))
        }
        let slotSize = Self.slotSize(forData: max(largest, 1024 - 48 - 64))
        let slots = max(limits.initialSlots, state.orphans.count * 2)
        _ = make(kind, &state, from: nil, slots: slots, slotSize: slotSize, reason: "reopen", warn: false)
    }

    /// A new generation of `kind` of `slots` slots of `slotSize` bytes, holding every token of
    /// `current` (which is retired) or, without one, the tokens kept for the kind; `nil` (nothing
    /// changed) when a limit forbids it or it cannot be made. Made and filled under the lock: a
    /// rotation or an early growth builds its generation beside the current one instead
    /// (``startBuild(_:_:reason:slots:slotSize:)``).
    private func make(
        _ kind: String,
        _ state: inout KindState,
        from current: SegmentWriter?,
        slots: Int,
        slotSize: Int,
        reason: String,
        warn: Bool = true
    ) -> SegmentWriter? {
        // This generation replaces any being built (whose bytes must not count against it).
        abandonBuild(&state)
        guard
            let writer = newGeneration(
                kind,
                policy: state.policy,
                slots: slots,
                slotSize: slotSize,
                reason: reason,
                warn: warn
            )
        else { return nil }
        if let current {
            // Sized for every token of `current`: none is left out.
            current.copyTokens(into: writer)
            retire(current)
        } else {
            for (id, orphan) in state.orphans
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
                state.orphans.removeValue(forKey: id)
            }
        }
        install(writer, kind, &state, reason: reason)
        return writer
    }

    /// A new, empty generation of `kind`, counted against the limits (unless `limited` is false:
    /// a kind's first segment); `nil` when a limit forbids it or it cannot be made.
    private func newGeneration(
        _ kind: String,
        policy: SegmentPolicy,
        slots: Int,
        slotSize: Int,
        reason: String,
        warn: Bool = true,
        limited: Bool = true
    ) -> SegmentWriter? {
        let now = limitClock()
        return shared.withLock { shared -> SegmentWriter? in
            var recent = shared.recentGenerations[kind, default: []].filter {
                now &- $0 < UInt64(saturatingNanoseconds: limits.generationWindow)
            }
            // Every generation that may still be mapped counts, the one this replaces included (a
            // reader may keep it), and one being built: the segments never take more than the
            // limit. A kind's retired generations that readers keep may take only their share, so
            // one kind's readers cannot use up the others' room.
            shared.mapped.collect()
            let newBytes = SegmentWriter.size(slotCount: slots, slotSize: slotSize)
            let retiredShare = limits.maxTotalBytes / (2 * max(1, shared.kindCount))
            guard
                !limited
                    || (recent.count < limits.maxGenerationsPerMinute
                        && shared.mapped.totalBytes + newBytes <= limits.maxTotalBytes
                        && shared.mapped.retiredBytes(of: kind) <= retiredShare)
            else {
                // A kind without a segment is tried again every beat: it is warned about once,
                // when it lost its segment.
                if warn {
                    logger.warning(
                        "shared-memory segment not replaced: limit reached",
                        metadata: ["token_kind": "\(kind)", "reason": "\(reason)", "bytes": "\(newBytes)"]
                    )
                }
                shared.recentGenerations[kind] = recent
                return nil
            }
            let writer: SegmentWriter
            do {
                writer = try SegmentWriter(
                    kind: kind,
                    generation: shared.nextGeneration,
                    slotCount: slots,
                    slotSize: slotSize,
                    policy: policy
                )
            } catch {
                if warn {
                    logger.error(
                        limited ? "shared-memory segment not made" : "no shared-memory segment for a kind",
                        metadata: ["token_kind": "\(kind)", "error": "\(error)"]
                    )
                }
                return nil
            }
            if limited {
                recent.append(now)
                shared.recentGenerations[kind] = recent
            }
            shared.nextGeneration += 1
            shared.generations += 1
            shared.mapped.add(writer)
            return writer
        }
    }

    /// Makes `writer` the kind's segment.
    private func install(_ writer: SegmentWriter, _ kind: String, _ state: inout KindState, reason: String) {
        state.writer = writer
        state.createdAt = fsm_boottime_ns()
        logger.debug(
            "shared-memory segment replaced",
            metadata: [
                "token_kind": "\(kind)", "reason": "\(reason)", "generation": "\(writer.generation)",
                "bytes": "\(writer.size)",
            ]
        )
    }

    // MARK: Generations built beside the current one

    /// Starts building `kind`'s next generation beside its current one: from now on every change
    /// to the kind goes to both, and ``advanceBuild(_:_:batch:)`` copies the current one's tokens
    /// into it a batch at a time, the lock released between batches, then switches to it. Sized
    /// like the current one (a rotation) unless `slots` and `slotSize` say otherwise (a growth).
    /// `false` when a limit forbids a new generation now.
    func startBuild(
        _ kind: String,
        _ state: inout KindState,
        reason: String,
        slots: Int? = nil,
        slotSize: Int? = nil,
        warn: Bool = true
    ) -> Bool {
        guard state.build == nil, let current = state.writer else { return false }
        guard
            let writer = newGeneration(
                kind,
                policy: state.policy,
                slots: slots ?? current.slotCount,
                slotSize: slotSize ?? current.slotSize,
                reason: reason,
                warn: warn
            )
        else { return false }
        state.build = Build(writer: writer, nextSlot: 0, reason: reason)
        return true
    }

    /// Starts growing `kind`'s segment beside itself once it is three quarters full: a generation
    /// of twice the slots, built while the rest fills, so a store rarely has to grow the segment
    /// under the lock (``grow(_:_:idLength:tokenLength:)``). A start a limit refuses is tried
    /// again a second later, silently (the one-step growth warns if it is refused too); the
    /// heartbeat is woken to copy.
    func startGrowthIfFilling(_ kind: String, _ state: inout KindState) {
        guard state.build == nil, let current = state.writer, current.count * 4 >= current.slotCount * 3 else {
            return
        }
        let now = limitClock()
        guard now >= state.growthNotBefore else { return }
        let started = startBuild(
            kind,
            &state,
            reason: "growth",
            slots: current.slotCount * 2,
            slotSize: Self.slotSize(forData: current.largestData),
            warn: false
        )
        if started {
            requestUpkeep(.copy)
        } else {
            state.growthNotBefore = now &+ 1_000_000_000
        }
    }

    /// Copies up to `batch` slots' tokens into the kind's generation being built, switching to it
    /// when every slot is copied (the one it replaces is retired), and zeroes up to `batch` slots
    /// of the generations builds replaced. Whether any work is left.
    func advanceBuild(_ kind: String, _ state: inout KindState, batch: Int) -> Bool {
        state.wiping.removeAll { !$0.wipe(count: batch) }
        var more = !state.wiping.isEmpty
        guard let build = state.build else { return more }
        guard let current = state.writer else {
            abandonBuild(&state)
            return more
        }
        var stored = true
        let next = current.copyTokens(into: build.writer, fromSlot: build.nextSlot, count: batch, stored: &stored)
        if !stored {
            // It could not take a token the current one holds (a token longer than its slots
            // since it started): the current one stays; a rotation is tried again at the next
            // beat, a growth when the segment fills.
            abandonBuild(&state)
        } else if let next {
            state.build?.nextSlot = next
            more = true
        } else {
            switchToBuild(kind, &state)
            more = true
        }
        return more
    }

    /// Copies the rest of the kind's growth being built and switches to it: the current segment
    /// filled before the build was done. The new segment, or `nil` when there was no growth
    /// being built (a rotation's is no larger) or it could not take a token.
    func finishBuild(_ kind: String, _ state: inout KindState) -> SegmentWriter? {
        guard let build = state.build, let current = state.writer, build.writer.slotCount > current.slotCount,
            build.writer.hasRoomForAnotherKey
        else { return nil }
        var stored = true
        _ = current.copyTokens(into: build.writer, fromSlot: build.nextSlot, count: Int.max, stored: &stored)
        guard stored else {
            abandonBuild(&state)
            return nil
        }
        switchToBuild(kind, &state)
        return build.writer
    }

    /// Makes the generation built the kind's segment. Readers of the current one ask for the new
    /// one from its flag on; its slots are zeroed a batch at a time from the next advance.
    private func switchToBuild(_ kind: String, _ state: inout KindState) {
        guard let build = state.build, let current = state.writer else { return }
        state.build = nil
        current.markRetired()
        shared.withLock { $0.mapped.retire(kind: kind, generation: current.generation) }
        state.wiping.append(current)
        install(build.writer, kind, &state, reason: build.reason)
        // Its slots zeroed right after, not at the next beat.
        requestUpkeep(.copy)
    }

    /// Drops the generation being built, if any (retired: it was never offered).
    func abandonBuild(_ state: inout KindState) {
        guard let build = state.build else { return }
        state.build = nil
        retire(build.writer)
    }
}
