// The descriptors the `SHM` verb hands readers: a read-only re-open of a kind's current
// segment, one per generation a connection has not had yet.
import CSharedMemory

extension SharedSegments {
    /// A read-only descriptor of a kind's current segment, for one peer.
    public struct Offer: Sendable {
        /// The descriptor (the receiver of the offer closes it).
        public var descriptor: Int32
        public var size: Int
        public var generation: UInt64
        public var kind: String
    }

    /// What ``offer(kind:unlessAlreadySent:)`` gave.
    public enum OfferOutcome: Sendable {
        case offered(Offer)
        /// The kind has no segment now (none could be made, or a reload withholds it).
        case none
        /// The current generation is one the asker already has.
        case alreadySent(generation: UInt64)
    }

    /// A read-only descriptor of `kind`'s current segment, unless `alreadySent` says the asker has
    /// that generation: both decided under one lock, so the generation checked is the one offered.
    public func offer(kind: String, unlessAlreadySent alreadySent: (UInt64) -> Bool) -> OfferOutcome {
        guard let entry = entry(kind) else { return .none }
        return entry.state.withLock { state -> OfferOutcome in
            guard let writer = state.writer, !state.withheld else { return .none }
            if alreadySent(writer.generation) { return .alreadySent(generation: writer.generation) }
            let descriptor = fsm_reopen_read_only(writer.descriptor)
            guard descriptor >= 0 else { return .none }
            descriptorCount.add(1, ordering: .relaxed)
            return .offered(Offer(descriptor: descriptor, size: writer.size, generation: writer.generation, kind: kind))
        }
    }
}
