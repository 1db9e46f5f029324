import Foundation
import Synchronization

/// `CLOCK_MONOTONIC` in nanoseconds: one vDSO read and no `Duration` arithmetic, so the timer
/// adds as little as it can to the sub-microsecond rows (the "timer floor" row measures what it
/// still adds).
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

/// Latencies of one benchmark and its throughput.
struct Measurement {
    var name: String
    var concurrency: Int
    var operations: Int
    var seconds: Double
    var latencies: [Double]  // seconds, sorted

    var opsPerSecond: Double { Double(operations) / seconds }
    func percentile(_ p: Double) -> Double {
        latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
    }
    var median: Double { percentile(0.5) }

    var row: String {
        String(
            // Sub-microsecond figures with three decimals (nanoseconds), the rest with one.
            format: median < 1e-5 ? "| %@ | %d | %d | %.3f | %.3f | %.0f |" : "| %@ | %d | %d | %.1f | %.1f | %.0f |",
            name,
            concurrency,
            operations,
            median * 1e6,
            percentile(0.99) * 1e6,
            opsPerSecond
        )
    }

    static let header = """
        | benchmark | concurrency | operations | p50 µs | p99 µs | ops/s |
        |---|---|---|---|---|---|
        """
}

/// Runs `operation` `operations` times from `concurrency` tasks, after `warmUp` untimed runs.
func measure(
    _ name: String,
    operations: Int,
    concurrency: Int,
    warmUp: Int = 200,
    _ operation: @escaping @Sendable () async throws -> Void
) async throws -> Measurement {
    try await measure(name, operations: operations, concurrency: concurrency, warmUp: warmUp) { _ in
        try await operation()
    }
}

/// Runs `operation` `operations` times from `concurrency` tasks, after `warmUp` untimed runs,
/// passing each call a counter of its own task's (started at a different value in each task), so
/// callers can spread over keys without sharing anything between tasks.
func measure(
    _ name: String,
    operations: Int,
    concurrency: Int,
    warmUp: Int = 200,
    indexed operation: @escaping @Sendable (Int) async throws -> Void
) async throws -> Measurement {
    for index in 0..<warmUp { try await operation(index) }
    let perTask = operations / concurrency
    let started = monotonicNanoseconds()
    let latencies = try await withThrowingTaskGroup(of: [UInt64].self) { group in
        for task in 0..<concurrency {
            group.addTask {
                var mine = [UInt64](repeating: 0, count: perTask)
                var index = task &* 7
                for call in 0..<perTask {
                    let start = monotonicNanoseconds()
                    try await operation(index)
                    mine[call] = monotonicNanoseconds() &- start
                    index &+= 1
                }
                return mine
            }
        }
        return try await group.reduce(into: [UInt64]()) { $0 += $1 }
    }
    let total = monotonicNanoseconds() &- started
    return Measurement(
        name: name,
        concurrency: concurrency,
        operations: perTask * concurrency,
        seconds: Double(total) / 1e9,
        latencies: latencies.sorted().map { Double($0) / 1e9 }
    )
}

/// Runs a blocking `operation` `operations` times on the calling thread.
func measureBlocking(_ name: String, operations: Int, warmUp: Int = 500, _ operation: () throws -> Void) rethrows
    -> Measurement
{
    for _ in 0..<warmUp { try operation() }
    var latencies = [UInt64](repeating: 0, count: operations)
    let started = monotonicNanoseconds()
    for call in 0..<operations {
        let start = monotonicNanoseconds()
        try operation()
        latencies[call] = monotonicNanoseconds() &- start
    }
    let total = monotonicNanoseconds() &- started
    return Measurement(
        name: name,
        concurrency: 1,
        operations: operations,
        seconds: Double(total) / 1e9,
        latencies: latencies.sorted().map { Double($0) / 1e9 }
    )
}

/// Runs `operation` `operations` times in a loop on the main actor, as a worker's top-level code
/// or UI code calls: whatever does not suspend must not leave the main actor either.
@MainActor
func measureOnMainActor(
    _ name: String,
    operations: Int,
    warmUp: Int = 200,
    _ operation: @MainActor () async throws -> Void
) async throws -> Measurement {
    for _ in 0..<warmUp { try await operation() }
    var latencies = [UInt64](repeating: 0, count: operations)
    let started = monotonicNanoseconds()
    for call in 0..<operations {
        let start = monotonicNanoseconds()
        try await operation()
        latencies[call] = monotonicNanoseconds() &- start
    }
    let total = monotonicNanoseconds() &- started
    return Measurement(
        name: name,
        concurrency: 1,
        operations: operations,
        seconds: Double(total) / 1e9,
        latencies: latencies.sorted().map { Double($0) / 1e9 }
    )
}

/// Runs `program` with `arguments` to its end and returns what it wrote to standard output;
/// throws when it fails. (It blocks the calling thread: for the benchmark's own programs, run
/// between rows, never while one is measured.)
func runToEnd(_ program: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self)
    guard process.terminationStatus == 0 else {
        throw BenchError("\(program) exited with \(process.terminationStatus): \(text)")
    }
    return text
}
