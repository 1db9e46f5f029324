import Foundation
import TestSupport
import TokenAgent

/// What the cache-file tests share: a directory on tmpfs (`/dev/shm`, memory-backed wherever the
/// suite runs; `/tmp` may be a disk) for the file, the agent's arguments, and reading the file.
struct CacheFileSetup {
    /// A fresh directory of the test's own, mode 0700.
    let directory: String
    /// The cache file in it.
    let path: String

    init() throws {
        directory = "/dev/shm/ftd-cache-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(
            atPath: directory,
            withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o700]
        )
        path = directory + "/tokens.cache"
    }

    /// Removes the directory and what is in it.
    func remove() { try? FileManager.default.removeItem(atPath: directory) }

    /// Flags for an agent serving `vehicle` and `trip` from `provider`, with this cache file.
    func arguments(_ provider: FakeTokenProvider, interval: Int? = nil) -> [String] {
        [
            "--provider", "vehicle=\(provider.url(kind: "vehicle"))", "--provider",
            "trip=\(provider.url(kind: "trip"))",
            "--cache-file", path,
        ] + (interval.map { ["--cache-file-interval", "\($0)"] } ?? [])
    }

    /// The file's bytes.
    func bytes() throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

    /// The file read as the agent reads it.
    func contents() throws -> CacheSnapshot.Contents { try CacheSnapshot.read(try bytes()) }

    /// Writes `bytes` in the file's place, mode 0600 (a test's own file, as the agent would).
    func write(_ bytes: [UInt8], mode: Int = 0o600) throws {
        try? FileManager.default.removeItem(atPath: path)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    /// The file's mode, owner and type, as `lstat` sees them.
    func status() -> stat? {
        var info = stat()
        return lstat(path, &info) == 0 ? info : nil
    }
}

/// The value of `name=` in the agent's log line that says `message`, if any.
func logField(_ log: String, _ message: String, _ name: String) -> String? {
    guard let line = log.split(separator: "\n").last(where: { $0.contains(message) }) else { return nil }
    guard let range = line.range(of: " \(name)=") else { return nil }
    return String(line[range.upperBound...].prefix { $0 != " " })
}
