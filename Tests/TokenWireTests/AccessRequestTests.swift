import Testing
import TokenWire

/// `access <name>` on the wire: the parser turns it into the entry's own kind (`access:<name>`)
/// with the name as its id, every request writes it back as it was sent, and the fast path leaves
/// it to the parser.
@Suite("Access requests")
struct AccessRequestTests {
    static let kind = "access:fleet-admin"

    private func parse(_ line: String) -> Result<WireRequest, WireError> { RequestParser.parse(text: line) }

    @Test func eachVerbNamesTheEntrysKind() {
        let cases: [(String, WireRequest)] = [
            ("GET access fleet-admin", .get(kind: Self.kind, id: "fleet-admin", minValiditySeconds: nil)),
            ("GET access fleet-admin 600", .get(kind: Self.kind, id: "fleet-admin", minValiditySeconds: 600)),
            ("REFRESH access fleet-admin", .refresh(kind: Self.kind, id: "fleet-admin")),
            (
                "REFRESH access fleet-admin ya29.a0Af-x_y",
                .refresh(kind: Self.kind, id: "fleet-admin", refusedToken: "ya29.a0Af-x_y")
            ),
            ("DROP access fleet-admin", .drop(kind: Self.kind, id: "fleet-admin")),
            ("INFO access fleet-admin", .info(kind: Self.kind, id: "fleet-admin")),
            ("SHM access fleet-admin", .shm(kind: Self.kind)),
            ("SHM access fleet-admin 1 2", .shm(kind: Self.kind, layouts: [1, 2])),
            ("TOUCH access fleet-admin", .touch(kind: Self.kind, ids: ["fleet-admin"])),
            ("WARM access fleet-admin", .warm(kind: Self.kind, ids: ["fleet-admin"])),
            ("get access 0-a", .get(kind: "access:0-a", id: "0-a", minValiditySeconds: nil)),
        ]
        for (line, request) in cases {
            #expect(parse(line) == .success(request), "\(line)")
            #expect(request.line == line.replacingOccurrences(of: "get ", with: "GET "), "\(request)")
            #expect(parse(request.line) == .success(request))
        }
    }

    @Test func aMalformedNameOrAWrongShapeIsRefused() {
        let rule = WireError(.badKind, AccessTokenKind.nameRule)
        let cases: [(String, WireError)] = [
            ("GET access Fleet-Admin", rule),
            ("GET access fleet_admin", rule),
            ("GET access abcdefghijklmnopqrstuvwxyz", rule),
            ("GET access *", rule),
            ("GET access ..", rule),
            ("REFRESH access x:y", rule),
            ("INFO access é", rule),
            ("SHM access Bad 2", rule),
            ("GET access", WireError(.badRequest, "usage: GET <kind> <id> [<min-validity-s>]")),
            ("SHM access", WireError(.badRequest, "usage: SHM access <name> [<layout> ...]")),
            ("SHM access a b", WireError(.badRequest, "usage: SHM access <name> [<layout> ...]")),
            ("SHM access a 1 2 3 4 5 6 7 8 9", WireError(.badRequest, "usage: SHM access <name> [<layout> ...]")),
            ("TOUCH access a b", WireError(.badRequest, "usage: TOUCH access <name>")),
            ("WARM access a b", WireError(.badRequest, "usage: WARM access <name>")),
            (
                "GET access fleet-admin soon",
                WireError(.badRequest, "id contains whitespace, or min-validity is not whole seconds from 0 to 86400")
            ),
        ]
        for (line, error) in cases {
            #expect(parse(line) == .failure(error), "\(line)")
        }
        // The longest name fits a segment's 32-byte kind.
        let longest = String(repeating: "a", count: AccessTokenKind.maxNameBytes)
        #expect(AccessTokenKind.kind(name: longest).utf8.count == WireLimits.maxKindBytes)
        #expect(
            parse("GET access \(longest)")
                == .success(.get(kind: "access:" + longest, id: longest, minValiditySeconds: nil))
        )
    }

    @Test func theFastPathLeavesAccessToTheParser() {
        for line in ["GET access fleet-admin", "GET access fleet-admin 600"] {
            let bytes = Array(line.utf8)
            #expect(bytes.withUnsafeBytes { SimpleGet.recognise($0) } == nil, "\(line)")
        }
        // A kind that merely starts like it is still a plain GET.
        #expect(Array("GET accesses a-1".utf8).withUnsafeBytes { SimpleGet.recognise($0) } != nil)
    }

    @Test func anEntrysKindTakesItsNameAloneAndIsNoKindARequestCanName() {
        #expect(TokenIdentifier.keyProblem(kind: Self.kind, id: "fleet-admin".utf8) == nil)
        #expect(TokenIdentifier.keyProblem(kind: Self.kind, id: "other".utf8) != nil)
        #expect(!TokenIdentifier.isWellFormedKind(Self.kind))
        #expect(AccessTokenKind.name(ofKind: Self.kind) == "fleet-admin")
        #expect(AccessTokenKind.name(ofKind: "access") == nil)
        #expect(AccessTokenKind.name(ofKind: "vehicle") == nil)
        #expect(
            parse("GET access:fleet-admin fleet-admin")
                == .failure(WireError(.badKind, "kind must be 1 to 32 of a-z, 0-9 and -"))
        )
        #expect(AccessTokenKind.wireFields(kind: Self.kind, id: "fleet-admin") == ("access", "fleet-admin"))
        #expect(AccessTokenKind.wireFields(kind: "vehicle", id: "v-1") == ("vehicle", "v-1"))
    }
}
