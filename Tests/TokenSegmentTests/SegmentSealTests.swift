import CSharedMemory
import Foundation
import Testing
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// A reader maps only a memory file that can never change size or content again.
@Suite("Token segment: seals")
struct SegmentSealTests {
    /// The seals of `F_ADD_SEALS` (linux/fcntl.h), which Glibc does not export to Swift.
    private static let addSeals: Int32 = 1033
    private static let sealShrink: Int32 = 2
    private static let sealGrow: Int32 = 4
    private static let sealWrite: Int32 = 8
    private static let sealFutureWrite: Int32 = 16

    /// A memory file holding a copy of a real segment, with only `seals` added.
    private func copy(seals: Int32) throws -> (fd: Int32, size: Int) {
        let policy = SegmentPolicy(minValidity: 300, servingFloor: 10, idleTimeout: 600)
        let writer = try SegmentWriter(kind: "vehicle", generation: 1, slotCount: 64, slotSize: 1024, policy: policy)
        var bytes = [UInt8](repeating: 0, count: writer.size)
        #expect(bytes.withUnsafeMutableBytes { pread(writer.descriptor, $0.baseAddress, $0.count, 0) } == writer.size)
        let fd = fsm_memfd_create("unsealed-copy")
        #expect(fd >= 0)
        #expect(ftruncate(fd, off_t(writer.size)) == 0)
        #expect(bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } == writer.size)
        if seals != 0 { #expect(fcntl(fd, Self.addSeals, seals) == 0) }
        return (fd, writer.size)
    }

    @Test(arguments: [0, sealShrink | sealGrow, sealWrite | sealShrink, sealWrite | sealGrow])
    func aFileThatCanStillChangeIsNeverMapped(_ seals: Int32) throws {
        let (fd, size) = try copy(seals: seals)
        defer { close(fd) }
        #expect(throws: SegmentError.self) { try SegmentReader(descriptor: fd, expectedSize: size, kind: "vehicle") }
    }

    @Test(arguments: [sealWrite | sealShrink | sealGrow, sealFutureWrite | sealShrink | sealGrow])
    func aFileSealedAgainstWritingGrowingAndShrinkingIsMapped(_ seals: Int32) throws {
        let (fd, size) = try copy(seals: seals)
        defer { close(fd) }
        let reader = try SegmentReader(descriptor: fd, expectedSize: size, kind: "vehicle")
        #expect(reader.size == size)
    }
}
