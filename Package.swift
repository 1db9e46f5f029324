// swift-tools-version: 6.2
import PackageDescription

let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]
/// `FLEET_TOKEND_CHECK_EXCLUSIVITY=1` keeps the exclusivity checks in release builds too, so that
/// scripts/test-release-checked can run the suite on release-optimised code with them on.
let checkExclusivity = Context.environment["FLEET_TOKEND_CHECK_EXCLUSIVITY"] == "1"
/// The agent's request path (engine and server): release builds leave out the run-time
/// exclusivity checks, which cost a fifth of a cached GET's instructions (docs/BENCHMARKS-METHOD.md,
/// "instructions per socket GET"). Debug builds, and so `scripts/test`, keep them, and so does
/// `scripts/test-release-checked` (the suite in release, `FLEET_TOKEND_CHECK_EXCLUSIVITY=1`). Not for the
/// targets the client library links: SwiftPM refuses unsafe flags in a remote package's
/// products, so `TokenAgent` and `TokenAgentServer` are for this package and path dependents
/// (`Benchmarks`), while a package that depends on this one by URL for `FleetTokenClient` builds.
let requestPath: [SwiftSetting] =
    checkExclusivity
    ? strict
    : strict + [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "fleet-tokend",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "fleet-tokend", targets: ["fleet-tokend"]),
        .library(name: "TokenAgent", targets: ["TokenAgent"]),
        .library(name: "TokenWire", targets: ["TokenWire"]),
        .library(name: "FleetTokenClient", targets: ["FleetTokenClient"]),
        .library(name: "TokenAgentServer", targets: ["TokenAgentServer"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // The line protocol: request parsing and reply encoding. No dependencies, shared by the
        // agent and the client library.
        .target(name: "TokenWire", swiftSettings: strict),
        // The build's version and commit (the agent's, not the client's: its plugin runs git).
        .plugin(name: "BuildCommitPlugin", capability: .buildTool()),
        .target(name: "BuildInfo", dependencies: ["TokenWire"], swiftSettings: strict, plugins: ["BuildCommitPlugin"]),
        // The shared-memory read path's C needs (memfd seals, SCM_RIGHTS, CLOCK_BOOTTIME) and the
        // segment layout with its one writer and its readers. Toolchain only: the client links them.
        .target(name: "CSharedMemory"),
        .target(name: "TokenSegment", dependencies: ["CSharedMemory"], swiftSettings: strict),
        // The agent's socket loop's C needs: epoll, eventfd, accept4, SO_PEERCRED.
        .target(name: "CSocketLoop"),
        // The thin client library workers link: TokenWire, TokenSegment and the toolchain only.
        .target(
            name: "FleetTokenClient",
            dependencies: ["TokenWire", "TokenSegment", "CSharedMemory"],
            swiftSettings: strict
        ),
        // An example worker that links the client.
        .executableTarget(
            name: "token-worker-example",
            dependencies: ["FleetTokenClient"],
            path: "Examples/TokenWorker",
            swiftSettings: strict
        ),
        // The worker scripts/e2e-containers runs in its worker containers: the client only.
        .executableTarget(
            name: "fleet-tokend-container-worker",
            dependencies: ["FleetTokenClient"],
            path: "Tests/ContainerWorker",
            swiftSettings: strict
        ),
        // libsystemd (Debian libsystemd-dev) and its Swift face: notify, listen fds, journal,
        // sealed memory files for the fd store. Nothing else calls C.
        .systemLibrary(
            name: "CSystemd",
            path: "Sources/CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(
            name: "Systemd",
            dependencies: ["CSystemd", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        // The engine: cache, refresh policy, singleflight, providers, configuration model, and the
        // token storage under the cache (Storage/: the shared-memory segments, the only copy).
        .target(
            name: "TokenAgent",
            dependencies: [
                "TokenWire",
                "TokenSegment",
                "CSharedMemory",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: requestPath
        ),
        // The socket server (its own epoll loop), connection handling, limits, metrics.
        .target(
            name: "TokenAgentServer",
            dependencies: [
                "BuildInfo",
                "TokenWire",
                "TokenAgent",
                "TokenSegment",
                "CSharedMemory",
                "CSocketLoop",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: requestPath
        ),
        // The executable: argument parsing and wiring services together.
        .executableTarget(
            name: "fleet-tokend",
            dependencies: [
                "BuildInfo",
                "TokenWire",
                "TokenAgent",
                "TokenAgentServer",
                "FleetTokenClient",
                "Systemd",
                "CSocketLoop",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // The reference models the fuzzers check against (request lines; provider replies), shared
        // by the tests that replay their corpora; scripts/fuzz compiles the same files into the
        // fuzzers.
        .target(
            name: "TestOracles",
            dependencies: ["TokenWire", "TokenAgent"],
            path: "Tests/TestOracles",
            swiftSettings: strict
        ),
        // What the test targets share: waiting (`offPool`, `eventually`), a log-capturing handler,
        // the seeded random generator and the documents' reader (DocText).
        .target(
            name: "TestSupport",
            dependencies: [.product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport",
            swiftSettings: strict
        ),
        // Fakes of Google's metadata server, OAuth token endpoint and IAM Credentials on one loopback
        // port: for the credential and signer tests, and (fake-google) for scripts and containers.
        .target(
            name: "FakeGoogle",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            path: "Tests/FakeGoogle",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "fake-google",
            dependencies: ["FakeGoogle"],
            path: "Tests/FakeGoogleMain",
            swiftSettings: strict
        ),
        .testTarget(
            name: "CredentialsTests",
            dependencies: [
                "TokenAgent",
                "FakeGoogle",
                "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TokenWireTests",
            dependencies: ["TokenWire", "TestOracles", "TestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TokenAgentServerTests",
            dependencies: [
                "TokenAgentServer",
                "TestOracles",
                "TestSupport",
                "TokenAgent",
                "TokenSegment",
                "CSharedMemory",
                "CSocketLoop",
                "TokenWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // The client library's own unit tests: reply parsing, the memo, flights and segment reads,
        // without an agent (and so without NIO).
        .testTarget(
            name: "FleetTokenClientTests",
            dependencies: ["FleetTokenClient", "TokenWire", "TokenSegment", "CSharedMemory"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TokenSegmentTests",
            dependencies: ["TokenSegment", "CSharedMemory", "TestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "SystemdTests",
            dependencies: ["Systemd", "TestSupport", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TokenAgentTests",
            dependencies: [
                "TokenAgent",
                "TokenWire",
                "TokenSegment",
                "CSharedMemory",
                // For EngineFailure's wire mapping, which the engine's tests check through, and
                // the segments' heartbeat.
                "TokenAgentServer",
                "TestOracles",
                "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "TokenWire",
                "TokenSegment",
                "TokenAgent",
                "TokenAgentServer",
                "CSharedMemory",
                "FleetTokenClient",
                "FakeGoogle",
                "TestSupport",
                "Systemd",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
    ]
)
