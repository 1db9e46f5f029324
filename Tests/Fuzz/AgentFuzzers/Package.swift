// swift-tools-version: 6.2
// The fuzzers of the agent's own modules: their own package, so that scripts/fuzz can build them
// with libFuzzer and AddressSanitizer (`-sanitize=fuzzer,address -parse-as-library`) in
// .build-fuzz without touching the main build. Each links the agent's real TokenAgent module:
// `fuzz-provider-replies` (a provider's HTTP reply) and `fuzz-cache-snapshots` (a cache snapshot,
// as the cache file or the fd store hands it to a starting agent).
import PackageDescription

let package = Package(
    name: "fleet-tokend-fuzz",
    dependencies: [.package(name: "fleet-tokend", path: "../../..")],
    targets: [
        // The entry into libFuzzer's driver that both fuzzers start by.
        .target(name: "LibFuzzerDriver", swiftSettings: [.treatAllWarnings(as: .error)]),
        .executableTarget(
            name: "fuzz-provider-replies",
            dependencies: ["LibFuzzerDriver", .product(name: "TokenAgent", package: "fleet-tokend")],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
        .executableTarget(
            name: "fuzz-cache-snapshots",
            dependencies: ["LibFuzzerDriver", .product(name: "TokenAgent", package: "fleet-tokend")],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
    ]
)
