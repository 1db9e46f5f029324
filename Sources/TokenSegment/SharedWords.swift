import Synchronization

/// 64-bit words of a shared mapping, every access an atomic one: the segment is read by other
/// processes while the agent writes it, so a plain load or store would be a data race (and a
/// compiler may hoist plain loads out of a retry loop).
@usableFromInline
struct SharedWords {
    @usableFromInline let words: UnsafePointer<Atomic<UInt64>>

    /// The words of the mapping at `base` (8-byte aligned, page aligned in practice).
    @inlinable
    init(_ base: UnsafeRawPointer) {
        words = base.assumingMemoryBound(to: Atomic<UInt64>.self)
    }

    @inlinable
    func load(_ index: Int) -> UInt64 { words[index].load(ordering: .relaxed) }

    @inlinable
    func loadAcquiring(_ index: Int) -> UInt64 { words[index].load(ordering: .acquiring) }

    @inlinable
    func store(_ index: Int, _ value: UInt64) { words[index].store(value, ordering: .relaxed) }

    @inlinable
    func storeReleasing(_ index: Int, _ value: UInt64) { words[index].store(value, ordering: .releasing) }

    @inlinable
    func storeSequentially(_ index: Int, _ value: UInt64) {
        words[index].store(value, ordering: .sequentiallyConsistent)
    }
}
