import Foundation
import Testing

@testable import TokenAgent

/// Every file the agent is given is bounded before it is read: anything but a regular file is
/// refused (a FIFO without waiting for a writer), and no more than the file's limit + 1 bytes are
/// read, whatever `stat` says; the refusal names the setting, the file and its limit.
@Suite("Bounded file reads", .timeLimit(.minutes(2)))
struct BoundedFileTests {
    /// Each reader of a file, by its setting's name, and the limit it states.
    private static let readers: [(key: String, limit: String, read: @Sendable (String) throws -> Void)] = [
        ("config", "1 MiB", { _ = try ConfigurationFile.load(path: $0, over: AgentConfiguration()) }),
        (
            "issuer_key", "64 KiB",
            { path in
                var configuration = AgentConfiguration()
                configuration.issuerKeyPath = path
                _ = try ProviderSet.make(from: configuration)
            }
        ),
        (
            "issuers.vehicle.key_file", "64 KiB",
            { path in
                var configuration = AgentConfiguration()
                configuration.issuers["vehicle"] = IssuerSettings(keyFile: path)
                _ = try ProviderSet.make(from: configuration)
            }
        ),
        (
            "providers.vehicle.headers_file", "64 KiB",
            { path in
                var configuration = AgentConfiguration()
                configuration.providers["vehicle"] = ProviderSettings(url: "http://127.0.0.1:1/v/{id}")
                configuration.providers["vehicle"]?.headersFile = path
                _ = try ProviderSet.make(from: configuration)
            }
        ),
        ("credentials", "1 MiB", { _ = try HostCredentials.source(for: .file(path: $0, via: "test")) }),
    ]

    /// The reason each reader gives for `path`, each read on a thread of its own and all at once:
    /// a reader that blocks (on a FIFO) fails the test at the deadline instead of holding a pool
    /// thread. The deadline only catches a reader that never returns; on a loaded machine a
    /// reader of `/proc/kallsyms` (generated as it is read) can take seconds.
    private func refusals(of path: String) async -> [(key: String, limit: String, reason: String?)] {
        await withTaskGroup(of: (Int, String?).self) { group in
            for (index, reader) in Self.readers.enumerated() {
                group.addTask {
                    let reason = await untilDeadline(.now + .seconds(45)) {
                        await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
                            Thread.detachNewThread {
                                do {
                                    try reader.read(path)
                                    continuation.resume(returning: nil)
                                } catch let error as ConfigurationError {
                                    continuation.resume(returning: "\(error.key): \(error.reason)")
                                } catch {
                                    continuation.resume(returning: "\(error)")
                                }
                            }
                        }
                    }
                    return (index, reason ?? "still reading after 45 s")
                }
            }
            var reasons = [String?](repeating: nil, count: Self.readers.count)
            for await (index, reason) in group { reasons[index] = reason }
            return Self.readers.enumerated().map { index, reader in (reader.key, reader.limit, reasons[index]) }
        }
    }

    /// What `key`'s refusal of `path` reads (credentials say how the file was found first).
    private func expected(_ key: String, _ text: String) -> String {
        key == "credentials" ? "credentials: test file \(text)" : "\(key): \(text)"
    }

    @Test func aFIFOIsRefusedWithoutWaitingForAWriter() async throws {
        let directory = NSTemporaryDirectory() + "ftd-fifo-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fifo = directory + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        for (key, _, reason) in await refusals(of: fifo) {
            #expect(reason == expected(key, "\(fifo) is not a regular file"))
        }
    }

    @Test func aDeviceIsRefused() async {
        for (key, _, reason) in await refusals(of: "/dev/zero") {
            #expect(reason == expected(key, "/dev/zero is not a regular file"))
        }
    }

    /// `/proc/kallsyms` is a regular file whose `stat` size is 0 and whose contents run to
    /// megabytes: each reader stops one byte past its limit.
    @Test func aProcFileIsReadOnlyToItsLimit() async {
        let path = "/proc/kallsyms"
        for (key, limit, reason) in await refusals(of: path) {
            #expect(reason == expected(key, "\(path) is over its limit of \(limit)"))
        }
    }

    /// A sparse 1 GiB file is refused from its size, before any of it is read: the process's
    /// peak resident size does not grow by anything like it.
    @Test func anOverLimitSparseFileIsRefusedUnread() async throws {
        let path = NSTemporaryDirectory() + "ftd-sparse-\(UUID().uuidString.prefix(8))"
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(truncate(path, 1 << 30) == 0)
        let before = Self.peakResidentBytes()
        for (key, limit, reason) in await refusals(of: path) {
            #expect(reason == expected(key, "\(path) is over its limit of \(limit)"))
        }
        let grown = Self.peakResidentBytes() - before
        #expect(grown < 256 << 20, "peak grew by \(grown >> 20) MiB")
    }

    @Test func aFileAtItsLimitIsReadAndOneByteMoreIsNot() throws {
        let path = NSTemporaryDirectory() + "ftd-limit-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(repeating: 0x61, count: 100).write(to: URL(fileURLWithPath: path))
        #expect(try BoundedFile.read(path, limit: 100).count == 100)
        #expect(throws: BoundedFileError(path: path, problem: .overLimit(99))) {
            try BoundedFile.read(path, limit: 99)
        }
        #expect(throws: BoundedFileError(path: "/proc/self/maps", problem: .overLimit(16))) {
            try BoundedFile.read("/proc/self/maps", limit: 16)
        }
        #expect(BoundedFile.describe(limit: 1024 * 1024) == "1 MiB")
        #expect(BoundedFile.describe(limit: 65536) == "64 KiB")
        #expect(BoundedFile.describe(limit: 99) == "99 bytes")
    }

    /// The largest resident size the process has had, bytes.
    private static func peakResidentBytes() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss * 1024
    }
}
