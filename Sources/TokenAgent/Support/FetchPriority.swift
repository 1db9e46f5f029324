import Synchronization

/// Why a fetch is made, highest priority first: where it waits, in a ``SignatureBudget`` and in
/// its kind's lane (``AsyncLimiter``), it goes before every waiter of a lower priority, and in
/// arrival order among its own.
public enum FetchPriority: Int, Sendable, Hashable, CaseIterable, Comparable, CustomStringConvertible {
    /// A request someone waits for (GET, REFRESH): first in the budget.
    case get = 0
    /// A background refresh of a token in use: after GETs in the budget, first in the lane
    /// (its token is about to be needed, and it already has its permit).
    case refresh = 1
    /// A `WARM`: tokens asked for ahead of need, which nobody waits for. Last everywhere.
    case warm = 2

    /// Higher priority compares smaller: `.get < .refresh < .warm`.
    public static func < (lhs: FetchPriority, rhs: FetchPriority) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .get: return "get"
        case .refresh: return "refresh"
        case .warm: return "warm"
        }
    }
}

/// One fetch's place in the queues it waits in: its priority, which a request joining the fetch
/// raises to ``FetchPriority/get`` (``promote()``). The same ticket is handed to the budget and to
/// the lane, so a promotion reaches it wherever it waits, or will wait.
public final class FetchTicket: Sendable {
    private static let numbers = Atomic<UInt64>(0)

    /// Tells this ticket from every other, in every queue.
    let number: UInt64
    /// The priority the fetch started with.
    public let requested: FetchPriority
    private let promotedFlag = Atomic<Bool>(false)

    /// A ticket for a fetch of `priority`.
    public init(priority: FetchPriority) {
        requested = priority
        number = Self.numbers.add(1, ordering: .relaxed).newValue
    }

    /// Whether a request joined the fetch and raised it to ``FetchPriority/get``.
    public var isPromoted: Bool { promotedFlag.load(ordering: .acquiring) }

    /// The priority in force: ``FetchPriority/get`` once promoted.
    public var priority: FetchPriority { isPromoted ? .get : requested }

    /// Raises the ticket to ``FetchPriority/get``; `false` when it already was. The caller then
    /// tells the queues the ticket may be waiting in.
    @discardableResult
    public func promote() -> Bool {
        guard requested != .get else { return false }
        return promotedFlag.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing)
            .exchanged
    }
}

/// Waiters in three levels (0 first), first come first served within a level; a waiter can be
/// raised to a better level (it then queues behind those already there). Waiters are keyed by
/// their ticket number; a queue's entry whose waiter left or moved is skipped when it comes up,
/// and the queues' storage shrinks as they drain. Not locked: its owner holds it under a lock.
struct PriorityWaiters<Waiter> {
    private struct Entry {
        var waiter: Waiter
        var level: Int
    }

    private struct Queue {
        var order: [UInt64] = []
        var head = 0

        var storage: Int { order.count - head }

        mutating func compact() {
            if head == order.count {
                order.removeAll(keepingCapacity: order.count <= 1024)
                head = 0
            } else if head >= 1024, head * 2 >= order.count {
                order.removeFirst(head)
                head = 0
            }
        }
    }

    private var entries: [UInt64: Entry] = [:]
    private var queues = [Queue(), Queue(), Queue()]

    /// Waiters now.
    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    /// Entries kept in the queues, stale ones included.
    var storage: Int { queues.reduce(0) { $0 + $1.storage } }

    /// Adds `waiter` at the end of `level`.
    mutating func add(_ number: UInt64, _ waiter: Waiter, level: Int) {
        entries[number] = Entry(waiter: waiter, level: level)
        queues[level].order.append(number)
    }

    /// Removes the waiter of `number`, wherever it waits.
    mutating func remove(_ number: UInt64) -> Waiter? {
        entries.removeValue(forKey: number)?.waiter
    }

    /// Moves the waiter of `number` to the end of `level` if that is better than its own.
    mutating func raise(_ number: UInt64, to level: Int) {
        guard let entry = entries[number], level < entry.level else { return }
        entries[number]!.level = level
        queues[level].order.append(number)
    }

    /// Every waiter (for a sweep: deadlines).
    var all: [(number: UInt64, waiter: Waiter)] { entries.map { ($0.key, $0.value.waiter) } }

    /// The waiters of `level` and better.
    func count(atOrAbove level: Int) -> Int { entries.values.reduce(0) { $0 + ($1.level <= level ? 1 : 0) } }

    /// The first waiter of the best level, removed.
    mutating func next() -> (number: UInt64, waiter: Waiter)? {
        for level in queues.indices {
            defer { queues[level].compact() }
            while queues[level].head < queues[level].order.count {
                let number = queues[level].order[queues[level].head]
                queues[level].head += 1
                // Gone, or moved to a better level since it was queued here.
                guard let entry = entries[number], entry.level == level else { continue }
                entries[number] = nil
                return (number, entry.waiter)
            }
        }
        return nil
    }
}
