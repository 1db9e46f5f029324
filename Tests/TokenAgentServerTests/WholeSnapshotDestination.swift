import Synchronization
import Testing
import TokenAgent
import TokenAgentServer

/// A destination of the tests that takes each snapshot whole, as the bytes a reader would read,
/// when the writer commits it.
protocol WholeSnapshotDestination: SnapshotDestination {
    /// The committed snapshot: header, then body.
    func received(_ bytes: [UInt8]) throws
}

extension WholeSnapshotDestination {
    func begin() throws -> any SnapshotSink { CollectingSink(self) }
}

/// Collects a snapshot's body, and hands it to its destination whole at the commit.
final class CollectingSink<Destination: WholeSnapshotDestination>: SnapshotSink {
    private let destination: Destination
    private var body: [UInt8] = []

    init(_ destination: Destination) { self.destination = destination }

    func append(_ bytes: UnsafeRawBufferPointer) throws { body += bytes }

    func commit(_ framing: CacheSnapshot.Encoded) throws {
        #expect(framing.header.count == CacheSnapshot.headerBytes)
        try destination.received(framing.header + body + framing.body)
    }

    func abandon() { body = [] }
}
