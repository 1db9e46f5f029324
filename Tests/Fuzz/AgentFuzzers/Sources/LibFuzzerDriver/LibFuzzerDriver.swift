// How the agent's fuzzers start: SwiftPM links an executable's entry point under `<module>_main`
// and points `main` at it; with `-parse-as-library` there is no Swift `main`, so each fuzzer's
// Driver.swift defines that symbol (`fuzz_provider_replies_main`, `fuzz_cache_snapshots_main`)
// and hands over here, to libFuzzer's own driver, which then calls the fuzzer's
// `LLVMFuzzerTestOneInput`.

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// Runs libFuzzer's driver with the process's arguments, feeding each input to `testOneInput`.
public func runLibFuzzer(
    _ argc: CInt,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments, testOneInput)
}
