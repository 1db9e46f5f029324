import NIOCore

/// A timer of a ``SocketLoop``: its body runs on the loop's thread once its deadline passes,
/// unless it was cancelled first.
final class LoopTimer: TransportTimer {
    fileprivate var body: (() -> Void)?

    fileprivate init(_ body: @escaping () -> Void) { self.body = body }

    func cancel() { body = nil }

    var isCancelled: Bool { body == nil }

    /// Runs the body, unless the timer was cancelled (or has run) by now.
    func fire() {
        guard let body else { return }
        self.body = nil
        body()
    }
}

/// The timers of one loop, earliest first (a binary heap on deadline, then start order).
/// A cancelled timer stays in the heap until its deadline, or until cancelled ones are over
/// half of it, when they are swept out: the heap never holds more than twice the live timers.
struct LoopTimers {
    private struct Entry {
        var deadline: UInt64
        var order: UInt64
        var timer: LoopTimer

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : order < other.order
        }
    }

    private var heap: [Entry] = []
    private var started: UInt64 = 0
    private var sinceSweep = 0

    /// Timers in the heap, cancelled or not.
    var count: Int { heap.count }

    /// Starts a timer that runs `body` at `deadline` (uptime nanoseconds).
    mutating func start(at deadline: UInt64, _ body: @escaping () -> Void) -> LoopTimer {
        let timer = LoopTimer(body)
        started &+= 1
        heap.append(Entry(deadline: deadline, order: started, timer: timer))
        siftUp(heap.count - 1)
        sinceSweep += 1
        if sinceSweep >= 1024, heap.count >= 1024 { sweepIfMostlyCancelled() }
        return timer
    }

    /// The earliest live deadline, if any timer is live.
    mutating func nextDeadline() -> UInt64? {
        while let first = heap.first, first.timer.isCancelled { removeFirst() }
        return heap.first?.deadline
    }

    /// Removes and returns the live timers due by `now`, in deadline order. Each runs when
    /// fired: one cancelled by an earlier one's body does not.
    mutating func takeDue(now: UInt64) -> [LoopTimer] {
        var due: [LoopTimer] = []
        while let first = heap.first, first.deadline <= now {
            removeFirst()
            if !first.timer.isCancelled { due.append(first.timer) }
        }
        return due
    }

    private mutating func sweepIfMostlyCancelled() {
        sinceSweep = 0
        let live = heap.filter { !$0.timer.isCancelled }
        guard live.count * 2 < heap.count else { return }
        heap = []
        heap.reserveCapacity(live.count)
        for entry in live {
            heap.append(entry)
            siftUp(heap.count - 1)
        }
    }

    private mutating func removeFirst() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        siftDown(0)
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { return }
            var least = left
            if left + 1 < heap.count, heap[left + 1].precedes(heap[left]) { least = left + 1 }
            guard heap[least].precedes(heap[parent]) else { return }
            heap.swapAt(least, parent)
            parent = least
        }
    }
}
