import LibFuzzerDriver

/// This fuzzer's entry point, libFuzzer's driver over `fuzzCacheSnapshots` (LibFuzzerDriver).
@_cdecl("fuzz_cache_snapshots_main")
public func fuzzCacheSnapshotsMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in fuzzCacheSnapshots(data, size) }
}
