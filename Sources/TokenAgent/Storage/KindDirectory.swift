import Synchronization

/// The first kinds' segment entries, found without a lock and without a retain: a cached GET
/// looks its kind up here on every request.
///
/// Entries are only ever added (a kind a reload removes keeps its entry, emptied), each written
/// before the count that covers it is stored, so a reader that loads the count sees every entry
/// under it, and an entry it finds lives as long as the directory. Only one thread adds at a time
/// (``SharedSegments`` adds under its table's lock). Past ``capacity`` kinds the directory is full
/// and the rest are found in ``SharedSegments``'s locked table only.
final class KindDirectory: @unchecked Sendable {
    /// The most entries kept here: a host serves a few kinds.
    static let capacity = 16

    private let slots: UnsafeMutablePointer<Unmanaged<SharedSegments.KindSegments>>
    private let count = Atomic(0)

    init() { slots = .allocate(capacity: Self.capacity) }

    deinit {
        let stored = count.load(ordering: .acquiring)
        for index in 0..<stored { slots[index].release() }
        slots.deinitialize(count: stored)
        slots.deallocate()
    }

    /// Whether every slot is taken: a kind not found here may then be in the table.
    var isFull: Bool { count.load(ordering: .acquiring) == Self.capacity }

    /// Adds `entry` (by one thread at a time); `false` when the directory is full.
    @discardableResult
    func add(_ entry: SharedSegments.KindSegments) -> Bool {
        let stored = count.load(ordering: .relaxed)
        guard stored < Self.capacity else { return false }
        (slots + stored).initialize(to: .passRetained(entry))
        count.store(stored + 1, ordering: .releasing)
        return true
    }

    /// `body` with the entry of `kind`, borrowed for the call; `nil` when none is here. Found as
    /// the table finds kinds (``Swift/Collection/first(named:by:)``: the same value first, then
    /// `==`).
    @inline(__always)
    func withEntry<Result>(named kind: String, _ body: (SharedSegments.KindSegments) -> Result) -> Result? {
        let entries = UnsafeBufferPointer(start: slots, count: count.load(ordering: .acquiring))
        let found = entries.first(named: kind, by: { $0._withUnsafeGuaranteedRef { $0.kind } })
        return found?._withUnsafeGuaranteedRef(body)
    }
}
