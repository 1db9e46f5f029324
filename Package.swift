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

/// The trait that brings in the packages the agent needs (SwiftNIO, swift-crypto, …), on by
/// default. `FleetTokenClient` needs none of them: a worker that depends on this package with
/// `traits: []` links the client, and SwiftPM neither resolves nor fetches the agent's packages
/// (README, "In a worker"). Every product of another package is used through `agentOnly`, so no
/// target holds one outside the trait.
let agentTrait = "Agent"

/// `name` of `package`, for the agent's targets and the tests: only with the `Agent` trait on.
func agentOnly(_ name: String, _ package: String) -> Target.Dependency {
    .product(name: name, package: package, condition: .when(traits: [agentTrait]))
}

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
    traits: [
        .trait(
            name: agentTrait,
            description: "The agent's packages; off for a worker that links FleetTokenClient only."
        ),
        .default(enabledTraits: [agentTrait]),
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
        // The line protocol: request parsing and reply encoding, shared by the agent and the
        // client library. Its one dependency is the segment's C header (CTokenSegment), for the
        // token bounds every reader checks (WireToken).
        .target(name: "TokenWire", dependencies: ["CTokenSegment"], swiftSettings: strict),
        // The build's version and commit (the agent's, not the client's: its plugin runs git).
        .plugin(name: "BuildCommitPlugin", capability: .buildTool()),
        .target(name: "BuildInfo", dependencies: ["TokenWire"], swiftSettings: strict, plugins: ["BuildCommitPlugin"]),
        // The shared-memory read path's C needs (memfd seals, SCM_RIGHTS, CLOCK_BOOTTIME) and the
        // segment layout with its one writer and its readers. Toolchain only: the client links them.
        .target(name: "CSharedMemory"),
        // The segment's packed layout, one C header (fleet_tokend_segment.h) that the Swift writer
        // and readers import and the C reader library (Examples/shm-reader) includes; TokenWire
        // takes the token bounds from it.
        .target(name: "CTokenSegment"),
        .target(name: "TokenSegment", dependencies: ["CSharedMemory", "CTokenSegment"], swiftSettings: strict),
        // The agent's socket loop's C needs: epoll, eventfd, accept4, SO_PEERCRED.
        .target(name: "CSocketLoop"),
        // The GCE metadata endpoint's C needs: a NETLINK_SOCK_DIAG (inet_diag) query for the owner
        // of a loopback TCP connection's other end.
        .target(name: "CPeerDiag"),
        // Who owns the client end of a loopback TCP connection (the kernel's word), and that
        // user's groups from the user database.
        .target(name: "LoopbackPeer", dependencies: ["CPeerDiag"], swiftSettings: strict),
        // The GCE metadata endpoint's paths, rules and answers, and its settings: pure, no I/O but
        // the token source it is given (the agent's access-token entries); TokenWire for its JSON
        // strings (JSONString).
        .target(name: "MetadataEndpoint", dependencies: ["TokenWire"], swiftSettings: strict),
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
            dependencies: ["CSystemd", agentOnly("Logging", "swift-log")],
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
                "MetadataEndpoint",
                agentOnly("Logging", "swift-log"),
                agentOnly("Crypto", "swift-crypto"),
                agentOnly("_CryptoExtras", "swift-crypto"),
                agentOnly("AsyncHTTPClient", "async-http-client"),
                agentOnly("NIOCore", "swift-nio"),
                // NIOConnectionError: what a connection (or a name's resolution) failed with.
                agentOnly("NIOPosix", "swift-nio"),
                agentOnly("NIOHTTP1", "swift-nio"),
                agentOnly("CoreMetrics", "swift-metrics"),
            ],
            swiftSettings: requestPath
        ),
        // The socket server (its own epoll loop), connection handling, limits, metrics, and the
        // optional GCE metadata endpoint's listener.
        .target(
            name: "TokenAgentServer",
            dependencies: [
                "BuildInfo",
                "TokenWire",
                "TokenAgent",
                "TokenSegment",
                "CSharedMemory",
                "CSocketLoop",
                "LoopbackPeer",
                "MetadataEndpoint",
                agentOnly("Logging", "swift-log"),
                agentOnly("NIOCore", "swift-nio"),
                agentOnly("NIOPosix", "swift-nio"),
                agentOnly("NIOHTTP1", "swift-nio"),
                agentOnly("ServiceLifecycle", "swift-service-lifecycle"),
                agentOnly("CoreMetrics", "swift-metrics"),
                agentOnly("Prometheus", "swift-prometheus"),
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
                agentOnly("ArgumentParser", "swift-argument-parser"),
                agentOnly("Logging", "swift-log"),
                agentOnly("ServiceLifecycle", "swift-service-lifecycle"),
                agentOnly("UnixSignals", "swift-service-lifecycle"),
                agentOnly("NIOPosix", "swift-nio"),
                agentOnly("NIOCore", "swift-nio"),
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
            dependencies: [agentOnly("Logging", "swift-log")],
            path: "Tests/TestSupport",
            swiftSettings: strict
        ),
        // Fakes of Google's metadata server, OAuth token endpoint and IAM Credentials on one loopback
        // port: for the credential and signer tests, and (fake-google) for scripts and containers.
        .target(
            name: "FakeGoogle",
            dependencies: [
                agentOnly("NIOCore", "swift-nio"),
                agentOnly("NIOPosix", "swift-nio"),
                agentOnly("NIOHTTP1", "swift-nio"),
                agentOnly("Crypto", "swift-crypto"),
                agentOnly("_CryptoExtras", "swift-crypto"),
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
                "TokenWire",
                "FakeGoogle",
                "TestSupport",
                agentOnly("Logging", "swift-log"),
                agentOnly("_CryptoExtras", "swift-crypto"),
                agentOnly("AsyncHTTPClient", "async-http-client"),
                agentOnly("NIOCore", "swift-nio"),
                agentOnly("NIOHTTP1", "swift-nio"),
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
                "LoopbackPeer",
                "MetadataEndpoint",
                agentOnly("Logging", "swift-log"),
                agentOnly("NIOCore", "swift-nio"),
                agentOnly("NIOTestUtils", "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // The client library's own unit tests: reply parsing, the memo, flights and segment reads,
        // without an agent (and so without NIO).
        .testTarget(
            name: "FleetTokenClientTests",
            dependencies: ["FleetTokenClient", "TokenWire", "TokenSegment", "CSharedMemory", "CTokenSegment"],
            swiftSettings: strict
        ),
        // The loopback peer lookup against real connections (other users' with root and setpriv).
        .testTarget(
            name: "LoopbackPeerTests",
            dependencies: ["LoopbackPeer", "TestSupport"],
            swiftSettings: strict
        ),
        // The metadata endpoint's router: every path and refusal, with a fake token source.
        .testTarget(name: "MetadataEndpointTests", dependencies: ["MetadataEndpoint"], swiftSettings: strict),
        .testTarget(
            name: "TokenSegmentTests",
            dependencies: ["TokenSegment", "CSharedMemory", "TestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "SystemdTests",
            dependencies: ["Systemd", "TestSupport", agentOnly("Logging", "swift-log")],
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
                agentOnly("Logging", "swift-log"),
                agentOnly("Crypto", "swift-crypto"),
                agentOnly("_CryptoExtras", "swift-crypto"),
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
                agentOnly("NIOCore", "swift-nio"),
                agentOnly("NIOPosix", "swift-nio"),
                agentOnly("NIOHTTP1", "swift-nio"),
            ],
            swiftSettings: strict
        ),
    ]
)
