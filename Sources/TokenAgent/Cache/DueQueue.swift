/// The scheduler's queue of one shard: a binary min-heap of (instant, slot) records saying when
/// an entry needs looking at next (a refresh falls due, it turns idle, it stops being servable).
///
/// A pass pops only the records that are due, so its cost follows what is due, not what is
/// cached. Records are never removed early: a record is current only while its slot's entry still
/// names its instant (``CacheEntry/scheduled``); any other record is stale and skipped.
struct DueQueue {
    struct Record {
        var at: MonotonicInstant
        var slot: Int32
    }

    private var heap: [Record] = []

    /// Records held, current and stale.
    var count: Int { heap.count }

    /// Adds a record.
    mutating func push(_ at: MonotonicInstant, slot: Int) {
        heap.append(Record(at: at, slot: Int32(slot)))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].at < heap[parent].at else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest record if it is due at `now`.
    mutating func popDue(at now: MonotonicInstant) -> Record? {
        guard let first = heap.first, first.at <= now else { return nil }
        let last = heap.removeLast()
        if heap.isEmpty { return first }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { break }
            let right = left + 1
            let child = right < heap.count && heap[right].at < heap[left].at ? right : left
            guard heap[child].at < heap[parent].at else { break }
            heap.swapAt(child, parent)
            parent = child
        }
        return first
    }

    /// Forgets every record (before rebuilding the queue from the entries).
    mutating func removeAll() { heap.removeAll(keepingCapacity: false) }
}
