// swift-tools-version: 6.2
// The provider-reply fuzzer: its own package, so that scripts/fuzz can build it with libFuzzer and
// AddressSanitizer (`-sanitize=fuzzer,address -parse-as-library`) in .build-fuzz without touching
// the main build. It links the agent's real TokenAgent module.
import PackageDescription

let package = Package(
    name: "fleet-tokend-fuzz",
    dependencies: [.package(name: "fleet-tokend", path: "../../..")],
    targets: [
        .executableTarget(
            name: "fuzz-provider-replies",
            dependencies: [.product(name: "TokenAgent", package: "fleet-tokend")],
            swiftSettings: [.treatAllWarnings(as: .error)]
        )
    ]
)
