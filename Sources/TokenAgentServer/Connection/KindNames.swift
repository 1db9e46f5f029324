import Synchronization
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// The configured kinds' names as a connection matches a request's kind against them: one table
/// for all the connections of a context (a socket loop's), so a GET reads the same few cache lines
/// whichever connection it came on, rather than a table of each connection's own. Immutable; a
/// reload that changes the kinds makes a new one (``Shared``).
final class KindNames: Sendable {
    /// The engine's kinds version the names were read at.
    let version: Int
    /// Each kind's name (the engine's own string) and where its bytes are in `bytes`, its length
    /// kept beside it so that a kind of another length is passed over without reading them.
    private let entries: [Entry]
    /// Every kind's bytes, one after another.
    private let bytes: [UInt8]

    private struct Entry: Sendable {
        let name: String
        let start: Int
        let count: Int
    }

    /// No names, at no version: what a handler and a context hold until their first look.
    static let none = KindNames(kinds: [], version: -1)

    /// The names of `kinds`, read at the engine's kinds `version`.
    init(kinds: [String], version: Int) {
        var entries: [Entry] = []
        var bytes: [UInt8] = []
        for kind in kinds {
            entries.append(Entry(name: kind, start: bytes.count, count: kind.utf8.count))
            bytes.append(contentsOf: kind.utf8)
        }
        self.entries = entries
        self.bytes = bytes
        self.version = version
    }

    /// The kind named by `candidate`, as the engine's string; `nil` when none is.
    func name(of candidate: UnsafeRawBufferPointer) -> String? {
        // A kind is never empty, nor is a request's (an empty name matches none).
        guard let wanted = candidate.baseAddress else { return nil }
        return bytes.withUnsafeBytes { all in
            for entry in entries where entry.count == candidate.count {
                if memcmp(all.baseAddress! + entry.start, wanted, entry.count) == 0 { return entry.name }
            }
            return nil
        }
    }

    /// The table in force for a context's connections, made again when the engine's kinds
    /// version moves.
    final class Shared: Sendable {
        private let current = Mutex(KindNames.none)

        /// The names of `engine`'s kinds now. The version is read before the kinds: a reload in
        /// between leaves a table of the new kinds under the old version, made again at the next
        /// look.
        func names(of engine: TokenEngine) -> KindNames {
            let version = engine.kindsVersion
            return current.withLock { names in
                if names.version != version { names = KindNames(kinds: engine.kinds, version: version) }
                return names
            }
        }
    }
}
