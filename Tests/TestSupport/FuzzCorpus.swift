import Foundation

/// The seed corpora of the libFuzzer targets in `Tests/Fuzz` (see `scripts/fuzz`), which the
/// replay tests run through the same oracles as the fuzzers.
public enum FuzzCorpus {
    /// `Tests/Fuzz/<name>`, found from this file's path.
    public static func directory(named name: String) -> URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz").appendingPathComponent(name)
    }

    /// The regular files of `Tests/Fuzz/<name>`, sorted by name; throws when the directory cannot
    /// be read.
    public static func files(named name: String) throws -> [URL] {
        try FileManager.default.contentsOfDirectory(
            at: directory(named: name),
            includingPropertiesForKeys: [.isRegularFileKey]
        )
        .filter { try $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile == true }
        .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    /// The contents of ``files(named:)``, in the same order.
    public static func contents(named name: String) throws -> [[UInt8]] {
        try files(named: name).map { Array(try Data(contentsOf: $0)) }
    }
}
