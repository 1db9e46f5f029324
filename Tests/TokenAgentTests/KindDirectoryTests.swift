import Testing

@testable import TokenAgent

/// ``KindDirectory``: the first kinds' entries, found with no lock, by the same value or by equal
/// names; full at its capacity, past which it takes nothing.
@Suite("Kind directory")
struct KindDirectoryTests {
    private func entry(_ kind: String) -> SharedSegments.KindSegments {
        SharedSegments.KindSegments(
            kind: kind,
            state: SharedSegments.KindState(policy: SharedSegments.segmentPolicy(RefreshPolicy()))
        )
    }

    @Test func entriesAreFoundByNameUntilTheDirectoryIsFull() {
        let directory = KindDirectory()
        var added: [SharedSegments.KindSegments] = []
        for index in 0..<KindDirectory.capacity {
            #expect(!directory.isFull)
            let kind = entry("kind-\(index)-" + String(repeating: "x", count: index))
            #expect(directory.add(kind))
            added.append(kind)
        }
        #expect(directory.isFull)
        #expect(!directory.add(entry("one-more")), "a full directory takes nothing")
        #expect(directory.withEntry(named: "one-more", { $0 }) == nil)
        for kind in added {
            // The same value, and an equal name made anew (other storage for the longer ones).
            #expect(directory.withEntry(named: kind.kind, { $0 }) === kind)
            let remade = String(decoding: Array(kind.kind.utf8), as: UTF8.self)
            #expect(directory.withEntry(named: remade, { $0 }) === kind, "\(remade)")
        }
        #expect(directory.withEntry(named: "kind-1", { $0 }) == nil, "a prefix is not the name")
        #expect(directory.withEntry(named: "", { $0 }) == nil)
    }

    @Test func anEmptyDirectoryFindsNothing() {
        let directory = KindDirectory()
        #expect(!directory.isFull)
        #expect(directory.withEntry(named: "vehicle", { _ in true }) == nil)
    }
}
