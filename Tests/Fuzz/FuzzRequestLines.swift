// The libFuzzer entry point for the request-line path. scripts/fuzz compiles it with
// `-sanitize=fuzzer,address` together with Sources/TokenWire/*.swift and
// Tests/TestOracles/RequestLinesOracle.swift into one module; libFuzzer supplies `main`.

/// Runs one fuzz input through ``RequestLinesOracle`` and traps on the first problem, so libFuzzer
/// saves the input as a crash.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRequestLines(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    let problems = RequestLinesOracle.problems(fuzzData: bytes)
    if !problems.isEmpty {
        fatalError("request-line oracle: \(problems.count) problem(s):\n" + problems.joined(separator: "\n"))
    }
    return 0
}
