// SwiftPM links an executable's entry point under `<module>_main` and points `main` at it; with
// `-parse-as-library` there is no Swift `main`, so this is that entry point. It hands over to
// libFuzzer's own driver, which then calls `LLVMFuzzerTestOneInput` (FuzzProviderReplies.swift).

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

@_cdecl("fuzz_provider_replies_main")
public func fuzzProviderRepliesMain(
    _ argc: CInt,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzProviderReplies(data, size) }
}
