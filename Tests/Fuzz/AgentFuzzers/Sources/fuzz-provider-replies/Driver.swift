import LibFuzzerDriver

/// This fuzzer's entry point, libFuzzer's driver over `fuzzProviderReplies` (LibFuzzerDriver).
@_cdecl("fuzz_provider_replies_main")
public func fuzzProviderRepliesMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in fuzzProviderReplies(data, size) }
}
