import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The C reader of Examples/shm-reader (libfleet-tokend-reader) reads layout 2 from segments built
/// word by word (``SegmentImage``), asks for that layout only, and refuses a layout-1 segment with
/// a reason that says so.
@Suite("The C reader's layouts", .enabled(if: CReader.available, "needs a C compiler"))
struct HostileCReaderLayoutTests {
    /// Hands `image` to a new C reader as an agent would (announced as `announced`, or its own
    /// layout) and asks it for `ids`: its greeting, and its answers if it mapped the segment.
    private func read(_ image: SegmentImage, announcing announced: Int? = nil, _ ids: [String]) async throws
        -> (greeting: String?, answers: [String?])
    {
        let descriptor = try image.sealed()
        defer { close(descriptor) }
        let shm = image.reply(descriptor, announcing: announced)
        let agent = try HostileAgent { _ in shm }
        defer { agent.stop() }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        guard reader.greeting?.hasPrefix("SEGMENT ") == true else { return (reader.greeting, []) }
        var answers: [String?] = []
        for id in ids { answers.append(try await reader.ask(id)) }
        return (reader.greeting, answers)
    }

    /// `answer` is a hit for `token`.
    private func isHit(_ answer: String?, _ token: String = "tok-v1") -> Bool {
        answer?.hasPrefix("HIT \(token) ") == true
    }

    // MARK: Layout 2 lookups

    @Test(arguments: [1, 12, 16, 1000])
    func aLayout2SegmentIsReadThroughItsIndex(_ indexCount: Int) async throws {
        var image = SegmentImage(indexCount: indexCount)
        image.putSlot(5, id: "v-1", token: "tok-v1")
        image[entry: image.home("v-1")] = image.entry(for: "v-1", slot: 5)
        let (greeting, answers) = try await read(image, ["v-1", "v-2"])
        #expect(greeting == "SEGMENT generation=7 size=\(image.size)")
        #expect(isHit(answers.first ?? nil), "\(answers)")
        #expect(answers.last == "MISS", "an id with no entry")
    }

    @Test func aNeverUsedEntryIsAMissThoughASlotHoldsTheId() async throws {
        var image = SegmentImage()
        for slot in 0..<image.slotCount { image.putSlot(slot, id: "v-1", token: "tok-v1") }
        let (greeting, answers) = try await read(image, ["v-1"])
        #expect(greeting?.hasPrefix("SEGMENT ") == true, "\(greeting ?? "no greeting")")
        #expect(answers == ["MISS"], "only the index finds a slot")
    }

    /// What a probe for `v-1` meets at its home entry before it reaches `v-1`'s own entry (or a
    /// never-used one): each is passed over.
    enum PassedOver: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// A removed entry, which still carries `v-1`'s hash bits.
        case removedEntry
        /// Another id's entry (other hash bits), naming that id's slot.
        case anotherIdsEntry
        /// An entry of `v-1`'s hash bits whose slot holds no token (removed after the entry was
        /// loaded).
        case emptiedSlot
        /// An entry of `v-1`'s hash bits whose slot now holds another id's token.
        case slotOfAnotherId
        /// An entry whose slot holds another id under `v-1`'s very hash: only the bytes differ.
        case anotherIdUnderTheSameHash
        /// An entry whose slot holds `v-1`'s bytes under another hash.
        case slotWithAnotherHash
        /// An entry whose slot holds `v-1` in a state other than live.
        case slotNotLive

        var testDescription: String { rawValue }

        /// Stores the case at `position` of `image` (its slot, if any, is slot 0).
        func store(in image: inout SegmentImage, at position: Int) {
            let own = image.entry(for: "v-1", slot: 0)
            switch self {
            case .removedEntry:
                image[entry: position] = image.entry(for: "v-1", slotPlusOne: SegmentImage.removedSlotBits)
            case .anotherIdsEntry:
                image.putSlot(0, id: "v-9", token: "tok-v9")
                image[entry: position] = image.entry(for: "v-9", slot: 0)
            case .emptiedSlot:
                image[entry: position] = own
            case .slotOfAnotherId:
                image.putSlot(0, id: "v-9", token: "tok-v9")
                image[entry: position] = own
            case .anotherIdUnderTheSameHash:
                image.putSlot(0, id: "v-9", token: "tok-v9", hash: image.hash("v-1"))
                image[entry: position] = own
            case .slotWithAnotherHash:
                image.putSlot(0, id: "v-1", token: "tok-stale", hash: image.hash("v-1") ^ 1)
                image[entry: position] = own
            case .slotNotLive:
                image.putSlot(0, id: "v-1", token: "tok-stale", state: 2)
                image[entry: position] = own
            }
        }
    }

    @Test(arguments: PassedOver.allCases)
    func aLayout2ProbeGoesOnPastEntriesThatAreNotTheIds(_ passed: PassedOver) async throws {
        var image = SegmentImage()
        try #require(image.hash("v-9") >> 32 != image.hash("v-1") >> 32, "the key makes v-9 another id's entry")
        passed.store(in: &image, at: image.home("v-1"))
        var behind = image
        behind.putSlot(3, id: "v-1", token: "tok-v1")
        behind[entry: behind.position("v-1", after: 1)] = behind.entry(for: "v-1", slot: 3)
        let found = try await read(behind, ["v-1"])
        #expect(isHit(found.answers.first ?? nil), "the id's entry behind: \(found)")
        let missed = try await read(image, ["v-1"])
        #expect(missed.answers == ["MISS"], "a never-used entry behind: \(missed)")
    }

    @Test(arguments: [9, 0x7FFF_FFFF, 0] as [UInt64])
    func aLayout2EntryNamingASlotPastTheTableIsDamage(_ slotPlusOne: UInt64) async throws {
        var image = SegmentImage()
        try #require(image.hash("v-1") >> 32 != 0, "the entry is not all zero")
        image.putSlot(3, id: "v-1", token: "tok-v1")
        image[entry: image.home("v-1")] = image.entry(for: "v-1", slotPlusOne: slotPlusOne)
        image[entry: image.position("v-1", after: 1)] = image.entry(for: "v-1", slot: 3)
        let (_, answers) = try await read(image, ["v-1"])
        #expect(answers == ["UNUSABLE index entry out of range"], "never a hit from a damaged index")
    }

    @Test(arguments: [(2, false), (3, true)] as [(UInt64, Bool)])
    func aLayout2ProbeStopsAfterTheMaxProbe(_ maxProbe: UInt64, _ reaches: Bool) async throws {
        var image = SegmentImage()
        image[header: SegmentImage.Word.maxProbe] = maxProbe
        for step in 0..<2 {
            image[entry: image.position("v-1", after: step)] = image.entry(
                for: "v-1",
                slotPlusOne: SegmentImage.removedSlotBits
            )
        }
        image.putSlot(3, id: "v-1", token: "tok-v1")
        image[entry: image.position("v-1", after: 2)] = image.entry(for: "v-1", slot: 3)
        let (_, answers) = try await read(image, ["v-1"])
        #expect(isHit(answers.first ?? nil) == reaches, "\(answers)")
        if !reaches { #expect(answers == ["MISS"]) }
    }

    @Test func aLayout2ProbeWrapsFromTheLastEntryToTheFirst() async throws {
        var image = SegmentImage()
        let id = try #require((0..<10_000).lazy.map { "w-\($0)" }.first { image.home($0) == image.indexCount - 1 })
        image[entry: image.indexCount - 1] = image.entry(for: id, slotPlusOne: SegmentImage.removedSlotBits)
        image.putSlot(2, id: id, token: "tok-wrapped")
        image[entry: 0] = image.entry(for: id, slot: 2)
        let (_, answers) = try await read(image, [id])
        #expect(isHit(answers.first ?? nil, "tok-wrapped"), "\(answers)")
    }

    @Test func aLayout2IndexWithNoNeverUsedEntryIsProbedOnceRound() async throws {
        var image = SegmentImage()
        image[header: SegmentImage.Word.maxProbe] = 1_000_000
        for position in 0..<image.indexCount {
            image[entry: position] = image.entry(for: "v-1", slotPlusOne: SegmentImage.removedSlotBits)
        }
        let (_, answers) = try await read(image, ["v-1"])
        #expect(answers == ["MISS"])
    }

    @Test(
        arguments: [
            ("tok-v1", 3600, "HIT tok-v1 "), ("tok-v1", 5, "MISS"), ("tok\u{1B}[2J", 3600, "UNUSABLE "),
        ] as [(String, UInt64, String)]
    )
    func aLayout2TokenIsJudgedByTheAgentsRule(_ token: String, _ validity: UInt64, _ expected: String) async throws {
        var image = SegmentImage()
        image.putSlot(1, id: "v-1", token: token, validity: validity)
        image[entry: image.home("v-1")] = image.entry(for: "v-1", slot: 1)
        let (_, answers) = try await read(image, ["v-1", "v-2"])
        #expect(answers.first??.hasPrefix(expected) == true, "\(answers)")
        #expect(answers.last == "MISS", "the next answer is the next id's")
    }

    // MARK: Headers

    /// A header that does not describe the segment it is mapped from, or not as the announced layout.
    enum HeaderDamage: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// 12 entries end at byte 352; slots there, not at 384, with every size consistent.
        case tableOffsetNotRounded
        /// Slots inside the index (at byte 320 of 16 entries), with every size consistent.
        case tableOffsetInsideTheIndex
        /// The segment-size word is not the announced size.
        case segmentSizeWord
        /// The table ends one slot short of the segment.
        case slotsShortOfTheSegment
        /// No index entry (the table at byte 256, every size consistent).
        case indexCountZero
        /// 2^61 + 16 entries: 8 times that wraps to 128, which would put the table where 16
        /// entries put it.
        case indexCountWrapping
        /// No slot.
        case slotCountZero
        /// A header size other than 256.
        case headerSize
        /// A layout-2 header announced as `layout=1`.
        case version2AnnouncedAsLayout1
        /// A layout-1 header announced as `layout=2`.
        case version1AnnouncedAsLayout2
        /// A layout this reader does not know, header and reply alike.
        case layout3

        var testDescription: String { rawValue }

        /// The segment, and the layout its reply announces (nil: its own).
        var segment: (image: SegmentImage, announced: Int?) {
            typealias W = SegmentImage.Word
            var image = SegmentImage()
            switch self {
            case .tableOffsetNotRounded: return (SegmentImage(indexCount: 12, tableOffset: 352), nil)
            case .tableOffsetInsideTheIndex: return (SegmentImage(indexCount: 16, tableOffset: 320), nil)
            case .segmentSizeWord: image[header: W.segmentSize] += 64
            case .slotsShortOfTheSegment: image[header: W.slots] -= 1
            case .indexCountZero: return (SegmentImage(indexCount: 0), nil)
            case .indexCountWrapping: image[header: W.indexCount] = (1 << 61) + 16
            case .slotCountZero: return (SegmentImage(slotCount: 0), nil)
            case .headerSize: image[header: W.versionAndHeaderSize] = 2 | (512 << 32)
            case .version2AnnouncedAsLayout1: return (image, 1)
            case .version1AnnouncedAsLayout2: return (SegmentImage(layout: 1), 2)
            case .layout3:
                image[header: W.versionAndHeaderSize] = 3 | (256 << 32)
                return (image, 3)
            }
            return (image, nil)
        }
    }

    @Test(arguments: HeaderDamage.allCases)
    func theCReaderRefusesAHeaderThatDoesNotDescribeTheSegment(_ damage: HeaderDamage) async throws {
        var (image, announced) = damage.segment
        // A token the reader would find, were the header right.
        if image.layout == 2, image.indexCount > 0, image.slotCount > 0 {
            image.putSlot(0, id: "v-1", token: "tok-v1")
            image[entry: image.home("v-1")] = image.entry(for: "v-1", slot: 0)
        }
        let (greeting, _) = try await read(image, announcing: announced, [])
        #expect(greeting?.hasPrefix("NOSEGMENT ") == true, "\(greeting ?? "no greeting")")
    }

    // MARK: Layout 1

    @Test func aLayout1SegmentIsRefusedNamingTheLayoutRead() async throws {
        var image = SegmentImage(layout: 1)
        image.putSlot(image.home("v-1"), id: "v-1", token: "tok-v1")
        let (greeting, answers) = try await read(image, ["v-1"])
        #expect(greeting == "NOSEGMENT not layout 2, the only one this reader reads")
        #expect(answers.isEmpty, "nothing read from it")
    }

    // MARK: Asking for a segment

    @Test func theCReaderAsksForLayout2() async throws {
        var image = SegmentImage()
        image.putSlot(0, id: "v-1", token: "tok-v1")
        image[entry: image.home("v-1")] = image.entry(for: "v-1", slot: 0)
        let descriptor = try image.sealed()
        defer { close(descriptor) }
        let requests = LineLog()
        let shm = image.reply(descriptor)
        let agent = try HostileAgent { line in
            requests.append(line)
            return shm
        }
        defer { agent.stop() }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(reader.greeting?.hasPrefix("SEGMENT ") == true, "\(reader.greeting ?? "no greeting")")
        #expect(requests.all == ["SHM vehicle 2"])
        #expect(isHit(try await reader.ask("v-1")))
    }

    @Test(
        arguments: [
            "ERR denied not allowed to ask for kind vehicle",
            "ERR busy too many segment requests on this connection",
            // An agent that knows only `SHM <kind>` (it would offer layout 1, no longer read).
            "ERR bad-request usage: SHM <kind>",
        ]
    )
    func theCReaderAsksOnceWhateverTheRefusal(_ refusal: String) async throws {
        let requests = LineLog()
        let agent = try HostileAgent { line in
            requests.append(line)
            return .line(refusal)
        }
        defer { agent.stop() }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(reader.greeting == "NOSEGMENT \(refusal)")
        #expect(requests.all == ["SHM vehicle 2"])
    }
}
