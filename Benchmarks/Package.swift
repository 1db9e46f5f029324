// swift-tools-version: 6.2
import Foundation
import PackageDescription

// The root package's identity is its folder's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
let rootIdentity = root.lastPathComponent.lowercased()

// The benchmarks are their own package, so `swift test` at the root never builds them.
// Run them with `bash Benchmarks/report.sh` (every headline figure) or `bash Benchmarks/run.sh`
// (token-bench alone); see docs/BENCHMARKS.md and docs/BENCHMARKS-METHOD.md.
let package = Package(
    name: "fleet-tokend-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        // ordo-one/benchmark with only its malloc interposer (allocation counts), not its ARC
        // runtime interposer.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "token-bench",
            dependencies: [
                .product(name: "FleetTokenClient", package: rootIdentity),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
        // <sys/epoll.h>, which the Swift Glibc module leaves out.
        .systemLibrary(name: "CEpoll", path: "Sources/CEpoll"),
        // The closed-loop load generator behind `bash Benchmarks/compare.sh`: plain POSIX sockets,
        // threads and epoll, no dependency beyond HdrHistogram.
        .executableTarget(
            name: "load-gen",
            dependencies: ["CEpoll", .product(name: "Histogram", package: "hdrhistogram-swift")],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
        // A bare epoll server answering GETs from a fixed table: the floor a purpose-built loop
        // could reach, beside Redis and the agent (docs/BENCHMARKS-METHOD.md, "Where the socket's floor is").
        .executableTarget(
            name: "epoll-floor",
            dependencies: ["CEpoll"],
            swiftSettings: [.treatAllWarnings(as: .error)]
        ),
        // The cached GET in-process: the agent's real socket loop serving one end of a socket
        // pair, and the real engine, measured by ordo-one/benchmark (malloc counts, wall clock). Lives
        // in Benchmarks/AgentHotPath, where the benchmark plugin looks for it. Run it with
        // `swift package benchmark --target AgentHotPath` (see docs/BENCHMARKS-METHOD.md).
        .executableTarget(
            name: "AgentHotPath",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "TokenAgent", package: rootIdentity),
                .product(name: "TokenAgentServer", package: rootIdentity),
            ],
            path: "Benchmarks/AgentHotPath",
            swiftSettings: [.treatAllWarnings(as: .error)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
