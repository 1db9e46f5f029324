import Foundation
import Synchronization

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
    for _ in 0..<warmUp { try await operation() }
    let perTask = operations / concurrency
    let clock = ContinuousClock()
    let started = clock.now
    let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
        for _ in 0..<concurrency {
            group.addTask {
                var mine: [Double] = []
                mine.reserveCapacity(perTask)
                for _ in 0..<perTask {
                    let start = clock.now
                    try await operation()
                    let elapsed = clock.now - start
                    mine.append(Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))
                }
                return mine
            }
        }
        return try await group.reduce(into: [Double]()) { $0 += $1 }
    }
    let total = clock.now - started
    return Measurement(
        name: name,
        concurrency: concurrency,
        operations: perTask * concurrency,
        seconds: Double(total.components.attoseconds) / 1e18 + Double(total.components.seconds),
        latencies: latencies.sorted()
    )
}

/// Runs a blocking `operation` `operations` times on the calling thread.
func measureBlocking(_ name: String, operations: Int, warmUp: Int = 500, _ operation: () throws -> Void) rethrows
    -> Measurement
{
    for _ in 0..<warmUp { try operation() }
    var latencies: [Double] = []
    latencies.reserveCapacity(operations)
    let clock = ContinuousClock()
    let started = clock.now
    for _ in 0..<operations {
        let start = clock.now
        try operation()
        let elapsed = clock.now - start
        latencies.append(Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))
    }
    let total = clock.now - started
    return Measurement(
        name: name,
        concurrency: 1,
        operations: operations,
        seconds: Double(total.components.attoseconds) / 1e18 + Double(total.components.seconds),
        latencies: latencies.sorted()
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
    var latencies: [Double] = []
    latencies.reserveCapacity(operations)
    let clock = ContinuousClock()
    let started = clock.now
    for _ in 0..<operations {
        let start = clock.now
        try await operation()
        let elapsed = clock.now - start
        latencies.append(Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))
    }
    let total = clock.now - started
    return Measurement(
        name: name,
        concurrency: 1,
        operations: operations,
        seconds: Double(total.components.attoseconds) / 1e18 + Double(total.components.seconds),
        latencies: latencies.sorted()
    )
}
