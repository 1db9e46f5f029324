// The libFuzzer entry point for cache snapshots. scripts/fuzz builds it, with the package in
// Tests/Fuzz/AgentFuzzers, against the agent's own TokenAgent module; libFuzzer supplies `main`.

/// Runs one fuzz input through ``CacheSnapshotOracle`` and traps on the first problem, so
/// libFuzzer saves the input as a crash. A trap inside the agent's code is a crash of its own.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCacheSnapshots(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    let problems = CacheSnapshotOracle.problems(fuzzData: bytes)
    if !problems.isEmpty {
        fatalError("cache-snapshot oracle: \(problems.count) problem(s):\n" + problems.joined(separator: "\n"))
    }
    return 0
}
