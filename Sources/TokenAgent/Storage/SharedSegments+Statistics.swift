// The segments' counts, for STATS and metrics.
extension SharedSegments {
    /// Counts for STATS and metrics.
    public struct Statistics: Sendable, Equatable {
        public var segments = 0
        public var bytes = 0
        public var slotsUsed = 0
        public var generations = 0
        public var descriptors = 0
        /// Tokens left out of shared memory: a limit stopped a segment's growth, or the token is
        /// larger than the largest slot.
        public var notMirrored = 0
        /// Tokens of kinds a limit left without a segment for now, kept privately until one can
        /// take them.
        public var heldOutside = 0
        /// The bytes of every generation that may still be mapped: the current segments and the
        /// retired ones a reader still holds.
        public var mappedBytes = 0
        /// Retired generations a reader still holds (a descriptor or a mapping).
        public var retiredMapped = 0
    }

    /// The segments' counts.
    public func statistics() -> Statistics {
        var statistics = Statistics()
        for entry in entries() {
            entry.state.withLock { state in
                guard let writer = state.writer else {
                    statistics.heldOutside += state.orphans.count
                    return
                }
                statistics.segments += 1
                statistics.bytes += writer.size
                statistics.slotsUsed += writer.count
                statistics.heldOutside += state.orphans.count
            }
        }
        shared.withLock { shared in
            shared.mapped.collect()
            statistics.generations = shared.generations
            statistics.mappedBytes = shared.mapped.totalBytes
            statistics.retiredMapped = shared.mapped.retiredCount
        }
        statistics.descriptors = descriptorCount.load(ordering: .relaxed)
        statistics.notMirrored = notMirroredCount.load(ordering: .relaxed)
        return statistics
    }
}
