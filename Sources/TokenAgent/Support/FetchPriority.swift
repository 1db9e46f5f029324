import Synchronization

/// Why a fetch is made, highest priority first: where it waits, in a ``SignatureBudget`` and in
/// its kind's lane (``AsyncLimiter``), it goes before every waiter of a lower priority; among its
/// own, the owners (uids) take turns, each in arrival order (``PriorityWaiters``).
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
    /// Whose fetch it is: the uid whose request started it; `nil` for the agent's own (a
    /// background refresh) or an unknown peer. Owners take turns within a priority.
    public let owner: UInt32?
    private let promotedFlag = Atomic<Bool>(false)

    /// A ticket for a fetch of `priority`, started by `owner`.
    public init(priority: FetchPriority, owner: UInt32? = nil) {
        requested = priority
        self.owner = owner
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

/// Waiters in three levels (0 first). Within a level the owners take turns (round robin), each
/// owner's waiters in arrival order: an owner with a thousand waiters queued goes once, then every
/// other owner waiting at that level goes once, and so on, so an owner asking within its share is
/// served however many another has queued. A waiter can be raised to a better level (it then
/// queues behind its owner's waiters already there). Waiters are keyed by their ticket number; a
/// queue's entry whose waiter left or moved is skipped when it comes up, and the queues' storage
/// shrinks as they drain. Not locked: its owner holds it under a lock.
struct PriorityWaiters<Waiter> {
    /// Whose waiters they are (`nil`: the agent's own, or an unknown peer: one owner together).
    typealias Owner = UInt32?

    private struct Entry {
        var waiter: Waiter
        var level: Int
        var owner: Owner
    }

    /// Elements in arrival order, consumed from `head`; the storage shrinks as it drains.
    private struct Drain<Element> {
        var order: [Element] = []
        var head = 0

        var storage: Int { order.count - head }
        var isDrained: Bool { head == order.count }

        /// The first element, taken off.
        mutating func popFirst() -> Element? {
            guard head < order.count else { return nil }
            defer {
                head += 1
                compact()
            }
            return order[head]
        }

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

    /// One level: each owner's ticket numbers, and the owners with numbers queued in the order of
    /// their turns.
    private struct Level {
        var queues: [Owner: Drain<UInt64>] = [:]
        var turns = Drain<Owner>()

        var storage: Int { queues.values.reduce(0) { $0 + $1.storage } }

        mutating func append(_ number: UInt64, owner: Owner) {
            if queues[owner] == nil {
                queues[owner] = Drain()
                turns.order.append(owner)
            }
            queues[owner]!.order.append(number)
        }
    }

    private var entries: [UInt64: Entry] = [:]
    private var levels = [Level(), Level(), Level()]

    /// Waiters now.
    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    /// Entries kept in the queues, stale ones included.
    var storage: Int { levels.reduce(0) { $0 + $1.storage } }

    /// Adds `waiter` of `owner` at the end of its owner's queue at `level`.
    mutating func add(_ number: UInt64, _ waiter: Waiter, level: Int, owner: Owner = nil) {
        entries[number] = Entry(waiter: waiter, level: level, owner: owner)
        levels[level].append(number, owner: owner)
    }

    /// Removes the waiter of `number`, wherever it waits.
    mutating func remove(_ number: UInt64) -> Waiter? {
        entries.removeValue(forKey: number)?.waiter
    }

    /// Moves the waiter of `number` to the end of its owner's queue at `level` if that is better
    /// than its own.
    mutating func raise(_ number: UInt64, to level: Int) {
        guard let entry = entries[number], level < entry.level else { return }
        entries[number]!.level = level
        levels[level].append(number, owner: entry.owner)
    }

    /// Every waiter (for a sweep: deadlines).
    var all: [(number: UInt64, waiter: Waiter)] { entries.map { ($0.key, $0.value.waiter) } }

    /// The waiters of `level` and better.
    func count(atOrAbove level: Int) -> Int { entries.values.reduce(0) { $0 + ($1.level <= level ? 1 : 0) } }

    /// The first waiter of the owner whose turn it is at the best level, removed; that owner's
    /// turn comes again after every other owner waiting there.
    mutating func next() -> (number: UInt64, waiter: Waiter)? {
        for level in levels.indices {
            while case .some(let owner) = levels[level].turns.popFirst() {
                guard var queue = levels[level].queues[owner] else { continue }
                var found: (number: UInt64, waiter: Waiter)?
                while found == nil, let number = queue.popFirst() {
                    // Gone, or moved to a better level since it was queued here.
                    guard let entry = entries[number], entry.level == level else { continue }
                    entries[number] = nil
                    found = (number, entry.waiter)
                }
                if queue.isDrained {
                    levels[level].queues[owner] = nil
                } else {
                    levels[level].queues[owner] = queue
                    levels[level].turns.order.append(owner)
                }
                if let found { return found }
            }
        }
        return nil
    }
}
