import CSharedMemory
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// Every segment generation the agent made that may still be mapped somewhere: its current
/// segments, and retired ones a reader still holds (a descriptor or a mapping). The kernel says
/// when a generation is gone: each is watched with inotify, whose watch ends when the memory file
/// is freed, that is once no process holds it any more (docs/SHM.md, "Memory").
///
/// Not thread-safe: ``SharedSegments`` keeps it under its lock.
final class MappedGenerations {
    /// A generation that may still be mapped.
    struct Generation {
        var kind: String
        var generation: UInt64
        var bytes: Int
        var retired = false
    }

    /// The inotify instance; -1 when the kernel would not give one (then every generation counts
    /// as mapped until the agent stops: the bound holds, at the cost of new generations).
    private let watch: Int32
    private var generations: [Int32: Generation] = [:]
    /// Generations whose watch could not be set: counted as mapped for good.
    private var unwatched: [Generation] = []

    init() {
        watch = fsm_release_watch_open()
    }

    deinit {
        if watch >= 0 { close(watch) }
    }

    /// Starts counting `writer`'s generation, which the writer still holds.
    func add(_ writer: SegmentWriter) {
        let generation = Generation(kind: writer.kind, generation: writer.generation, bytes: writer.size)
        if watch >= 0 {
            let number = fsm_release_watch_add(watch, writer.descriptor)
            if number >= 0 {
                generations[number] = generation
                return
            }
        }
        unwatched.append(generation)
    }

    /// Marks `kind`'s `generation` retired: from now on only readers can hold it.
    func retire(kind: String, generation: UInt64) {
        for (number, held) in generations where held.kind == kind && held.generation == generation {
            generations[number]?.retired = true
        }
        for index in unwatched.indices where unwatched[index].kind == kind && unwatched[index].generation == generation
        {
            unwatched[index].retired = true
        }
    }

    /// Forgets the generations the kernel has freed since the last call.
    func collect() {
        guard watch >= 0 else { return }
        withUnsafeTemporaryAllocation(of: Int32.self, capacity: 256) { released in
            while true {
                let count = fsm_release_watch_read(watch, released.baseAddress)
                guard count > 0 else { return }
                for number in released[0..<Int(count)] { generations[number] = nil }
            }
        }
    }

    /// The bytes of every generation that may still be mapped.
    var totalBytes: Int {
        generations.values.reduce(0) { $0 + $1.bytes } + unwatched.reduce(0) { $0 + $1.bytes }
    }

    /// The bytes of `kind`'s retired generations that a reader still holds.
    func retiredBytes(of kind: String) -> Int {
        generations.values.reduce(0) { $0 + ($1.kind == kind && $1.retired ? $1.bytes : 0) }
            + unwatched.reduce(0) { $0 + ($1.kind == kind && $1.retired ? $1.bytes : 0) }
    }

    /// How many retired generations a reader still holds.
    var retiredCount: Int {
        generations.values.reduce(0) { $0 + ($1.retired ? 1 : 0) } + unwatched.reduce(0) { $0 + ($1.retired ? 1 : 0) }
    }
}
