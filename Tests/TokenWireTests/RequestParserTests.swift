import Testing
import TokenWire

@Suite("Request parsing")
struct RequestParserTests {
    private func parse(_ line: String) -> Result<WireRequest, WireError> {
        RequestParser.parse(Array(line.utf8))
    }

    private func code(_ line: String) -> WireErrorCode? {
        if case .failure(let error) = parse(line) { return error.code }
        return nil
    }

    @Test func everyVerb() {
        #expect(parse("GET vehicle v-1") == .success(.get(kind: "vehicle", id: "v-1", minValiditySeconds: nil)))
        #expect(parse("GET trip t-1 120") == .success(.get(kind: "trip", id: "t-1", minValiditySeconds: 120)))
        #expect(parse("REFRESH vehicle v-1") == .success(.refresh(kind: "vehicle", id: "v-1")))
        #expect(parse("DROP trip t-9") == .success(.drop(kind: "trip", id: "t-9")))
        #expect(parse("PING") == .success(.ping))
        #expect(parse("STATS") == .success(.stats))
        #expect(parse("HELP") == .success(.help))
        #expect(parse("QUIT") == .success(.quit))
        #expect(parse("METRICS") == .success(.metrics))
        #expect(parse("metrics\r") == .success(.metrics))
        #expect(parse("INFO vehicle v-1") == .success(.info(kind: "vehicle", id: "v-1")))
    }

    @Test func metricsAndInfoCheckTheirFields() {
        #expect(parse("METRICS now") == .failure(WireError(.badRequest, "METRICS takes no arguments")))
        #expect(parse("INFO vehicle") == .failure(WireError(.badRequest, "usage: INFO <kind> <id>")))
        #expect(
            parse("INFO vehicle v-1 600")
                == .failure(
                    WireError(.badRequest, "usage: INFO <kind> <id> (too many fields: an id cannot contain whitespace)")
                )
        )
        // An id with two spaces: four fields after the verb.
        for (line, syntax) in [
            ("GET vehicle v 1 2", "GET <kind> <id> [<min-validity-s>]"),
            ("REFRESH vehicle v 1 2", "REFRESH <kind> <id> [<refused-token>]"),
            ("DROP vehicle v 1", "DROP <kind> <id>"),
        ] {
            #expect(
                parse(line)
                    == .failure(
                        WireError(.badRequest, "usage: \(syntax) (too many fields: an id cannot contain whitespace)")
                    ),
                "\(line)"
            )
        }
        #expect(
            parse("DROP vehicle") == .failure(WireError(.badRequest, "usage: DROP <kind> <id>")),
            "too few: usage alone"
        )
        #expect(code("INFO Vehicle v-1") == .badKind)
        #expect(code("INFO vehicle v/1") == .badID)
        for request in [WireRequest.metrics, .info(kind: "trip", id: "t-1")] {
            #expect(parse(request.line) == .success(request), "\(request.line) round-trips")
        }
    }

    @Test func verbsAreCaseInsensitiveAndCRIsDropped() {
        #expect(parse("get vehicle v-1\r") == .success(.get(kind: "vehicle", id: "v-1", minValiditySeconds: nil)))
        #expect(parse("pInG\r") == .success(.ping))
        #expect(parse("Refresh trip x") == .success(.refresh(kind: "trip", id: "x")))
    }

    @Test func repeatedSpacesSeparateFields() {
        #expect(parse("GET  vehicle   v-1 ") == .success(.get(kind: "vehicle", id: "v-1", minValiditySeconds: nil)))
    }

    @Test func shmNamesTheLayoutsItsReaderMaps() {
        #expect(parse("SHM vehicle") == .success(.shm(kind: "vehicle", layouts: [])))
        #expect(parse("SHM vehicle 1 2") == .success(.shm(kind: "vehicle", layouts: [1, 2])))
        #expect(parse("SHM trip 2") == .success(.shm(kind: "trip", layouts: [2])))
        #expect(WireRequest.shm(kind: "vehicle", layouts: [1, 2]).line == "SHM vehicle 1 2")
        #expect(WireRequest.shm(kind: "vehicle").line == "SHM vehicle")
        for line in [
            "SHM", "SHM vehicle 0", "SHM vehicle -1", "SHM vehicle 12345", "SHM vehicle two", "SHM vehicle 1.5",
            "SHM vehicle " + Array(repeating: "1", count: 9).joined(separator: " "),
        ] {
            #expect(code(line) == .badRequest, "\(line)")
        }
    }

    @Test func wrongFieldsAreBadRequests() {
        for line in [
            "", "   ", "GET", "GET vehicle", "GET vehicle a b c", "REFRESH vehicle", "DROP", "PING now",
            "STATS x", "QUIT please", "FETCH vehicle v", "GET\tvehicle v",
        ] {
            #expect(code(line) == .badRequest, "\(line)")
        }
    }

    @Test func minValidityMustBeWholeSecondsInRange() {
        for value in ["-1", "1.5", "abc", "86401", "9999999999999999999999", "+5", "0x10"] {
            #expect(code("GET vehicle v \(value)") == .badRequest, "\(value)")
        }
        #expect(parse("GET vehicle v 0") == .success(.get(kind: "vehicle", id: "v", minValiditySeconds: 0)))
        #expect(parse("GET vehicle v 86400") == .success(.get(kind: "vehicle", id: "v", minValiditySeconds: 86400)))
    }

    @Test func kindsMustBeWellFormed() {
        for kind in ["Vehicle", "veh_icle", "v.e", String(repeating: "k", count: 33), "véhicule"] {
            #expect(code("GET \(kind) v-1") == .badKind, "\(kind)")
        }
        #expect(code("GET delivery-vehicle d-1") == nil)
    }

    @Test func hostileIDsAreRefused() {
        let hostile = [
            "a/b", "a:b", "a\\b", "a?b", "a#b", "../../etc/passwd", "a\u{0}b", "a\u{7}b", "a\u{200B}b",
            "a\u{2028}b", "a\u{85}b", String(repeating: "x", count: 65), String(repeating: "é", count: 65),
            "a\u{00A0}b",
        ]
        for id in hostile {
            #expect(code("GET vehicle \(id)") == .badID, "\(id.debugDescription)")
        }
    }

    /// Every byte value in the middle of an id: the fast path takes exactly the printable ASCII
    /// bytes but `/ : \ ? #` (the id rule a byte at a time, built on `TokenIdentifier`'s
    /// forbidden characters, and the fast path's scan, each against the rule written out), and
    /// where it takes a line the parser reads the same GET from it.
    @Test func theFastPathTakesAnIDByteExactlyWhenTheRuleSaysSo() {
        for byte in UInt8.min...UInt8.max {
            let rule =
                byte > 0x20 && byte < 0x7F
                && ![
                    UInt8(ascii: "/"), UInt8(ascii: ":"), UInt8(ascii: "\\"),
                    UInt8(ascii: "?"), UInt8(ascii: "#"),
                ].contains(byte)
            #expect(SimpleGet.isIDByte(byte) == rule, "byte \(byte)")
            let line = Array("GET vehicle a".utf8) + [byte] + Array("b".utf8)
            let fast = line.withUnsafeBytes { SimpleGet.recognise($0) }
            #expect((fast != nil) == rule, "byte \(byte) in an id")
            if let fast {
                #expect(fast.id == 12..<15)
                let id = String(decoding: line[12..<15], as: UTF8.self)
                #expect(
                    parse(String(decoding: line, as: UTF8.self))
                        == .success(.get(kind: "vehicle", id: id, minValiditySeconds: nil))
                )
            }
        }
    }

    @Test func idsWithAMeaningOfTheirOwnAreRefusedOnEveryVerb() {
        let reasons = ["*": "id * is a wildcard", ".": "id . is a dot segment", "..": "id .. is a dot segment"]
        for (id, reason) in reasons {
            for line in [
                "GET vehicle \(id)", "GET trip \(id) 600", "REFRESH vehicle \(id)", "REFRESH vehicle \(id) tok",
                "DROP vehicle \(id)", "INFO vehicle \(id)", "TOUCH vehicle v-1 \(id)", "TOUCH custom-kind \(id)",
                "WARM vehicle v-1 \(id)", "WARM vehicle \(id)",
            ] {
                #expect(parse(line) == .failure(WireError(.badID, reason)), "\(line)")
                let bytes = Array(line.utf8)
                let fast = bytes.withUnsafeBytes { SimpleGet.recognise($0) }
                #expect(fast == nil, "the fast path leaves \(line) to the parser")
            }
            #expect(TokenIdentifier.isReserved(id.utf8))
        }
        // Their look-alikes under NFKC are refused as well.
        for id in [
            "\u{FF0A}", "\u{FE61}", "\u{2024}", "\u{FF0E}", "\u{FE52}", "\u{2025}", ".\u{FF0E}", "\u{2024}\u{2024}",
        ] {
            if case .failure(let error) = parse("GET vehicle \(id)") {
                #expect(error.code == .badID && error.message.hasSuffix("once normalised"), "\(id): \(error)")
            } else {
                Issue.record("\(id.unicodeScalars.map { String($0.value, radix: 16) }) was accepted")
            }
            #expect(TokenIdentifier.isReserved(id.utf8))
        }
        // Only the whole ids: these are ordinary.
        for id in [
            "**", "a*", "*a", "...", ".a", "a.", "a..b", "v-1.", "%2E%2E", "\u{2026}", "\u{2025}.", "\u{FF0A}a",
            "\u{2217}",
        ] {
            #expect(
                parse("GET vehicle \(id)") == .success(.get(kind: "vehicle", id: id, minValiditySeconds: nil)),
                "\(id)"
            )
            #expect(!TokenIdentifier.isReserved(id.utf8))
        }
    }

    @Test func unicodeIDsUpToSixtyFourCharactersAreFine() {
        let id = String(repeating: "é", count: 64)
        #expect(parse("GET vehicle \(id)") == .success(.get(kind: "vehicle", id: id, minValiditySeconds: nil)))
        #expect(parse("GET trip 行程-1") == .success(.get(kind: "trip", id: "行程-1", minValiditySeconds: nil)))
    }

    @Test func notUTF8IsABadRequest() {
        let bytes: [UInt8] = Array("GET vehicle ".utf8) + [0xFF, 0xFE]
        guard case .failure(let error) = RequestParser.parse(bytes) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error == WireError(.badRequest, "line is not UTF-8"))
    }

    @Test func overlongLineIsABadRequest() {
        let line = "GET vehicle " + String(repeating: "x", count: WireLimits.maxRequestLineBytes)
        #expect(parse(line) == .failure(WireError(.badRequest, "line too long")))
    }

    @Test func requestLineRoundTrips() {
        let requests: [WireRequest] = [
            .get(kind: "vehicle", id: "v-1", minValiditySeconds: nil),
            .get(kind: "trip", id: "t", minValiditySeconds: 5),
            .refresh(kind: "task", id: "k"), .drop(kind: "trip", id: "t"), .ping, .stats, .help, .quit,
        ]
        for request in requests {
            #expect(RequestParser.parse(text: request.line) == .success(request))
        }
    }

    @Test func warmTakesOneToSixtyFourIdsEachCheckedLikeGets() {
        let ids = (0..<64).map { "v-\($0)" }
        #expect(parse("WARM vehicle v-1") == .success(.warm(kind: "vehicle", ids: ["v-1"])))
        #expect(parse("warm trip  a b  a") == .success(.warm(kind: "trip", ids: ["a", "b", "a"])))
        #expect(parse("WARM vehicle " + ids.joined(separator: " ")) == .success(.warm(kind: "vehicle", ids: ids)))
        #expect(
            parse("WARM vehicle " + (ids + ["v-64"]).joined(separator: " "))
                == .failure(WireError(.badRequest, "too many ids; at most 64"))
        )
        #expect(parse("WARM vehicle") == .failure(WireError(.badRequest, "usage: WARM <kind> <id> [<id> ...]")))
        #expect(parse("WARM") == .failure(WireError(.badRequest, "usage: WARM <kind> <id> [<id> ...]")))
        #expect(code("WARM Vehicle a") == .badKind)
        #expect(code("WARM vehicle a a/b") == .badID)
        let request = WireRequest.warm(kind: "vehicle", ids: ["a", "b"])
        #expect(request.line == "WARM vehicle a b" && request.verb == .warm)
    }
}

@Suite("Request parser: wildcard kinds")
struct WildcardKindParserTests {
    @Test func wildcardKindsTakeStarAndNothingElse() {
        for kind in ["server", "delivery-server", "fleet-reader", "delivery-fleet-reader"] {
            #expect(
                RequestParser.parse(text: "GET \(kind) *")
                    == .success(.get(kind: kind, id: "*", minValiditySeconds: nil))
            )
            #expect(RequestParser.parse(text: "REFRESH \(kind) *") == .success(.refresh(kind: kind, id: "*")))
            for id in ["v-1", "..", "＊", "**"] {
                guard case .failure(let error) = RequestParser.parse(text: "GET \(kind) \(id)") else {
                    Issue.record("GET \(kind) \(id) parsed")
                    continue
                }
                #expect(error.code == .badID)
            }
        }
        guard case .failure(let error) = RequestParser.parse(text: "GET vehicle *") else {
            Issue.record("GET vehicle * parsed")
            return
        }
        #expect(error.code == .badID)
    }
}

@Suite("Fast GET path: wildcard kinds")
struct WildcardKindFastPathTests {
    @Test func wildcardKindsAlwaysGoToTheParser() {
        for kind in TokenIdentifier.wildcardKinds {
            for id in ["*", "v-1"] {
                let line = Array("GET \(kind) \(id)".utf8)
                #expect(line.withUnsafeBytes { SimpleGet.recognise($0) } == nil, "\(kind) \(id)")
            }
            #expect(Array(kind.utf8).withUnsafeBytes { TokenIdentifier.isWildcardKind($0) })
            #expect(TokenIdentifier.isWildcardKind(kind))
        }
        // Names of a wildcard kind's length, and one letter off.
        for kind in [
            "vehicle", "servers", "serve", "fleet-readers", "trip", "sarver", "fleet-reades", "delivery-serve2",
        ] {
            #expect(!Array(kind.utf8).withUnsafeBytes { TokenIdentifier.isWildcardKind($0) }, "\(kind)")
            #expect(!TokenIdentifier.isWildcardKind(kind), "\(kind)")
        }
        #expect(Array("GET vehicle v-1".utf8).withUnsafeBytes { SimpleGet.recognise($0) } != nil)
    }
}

/// Errors a person can act on (issue 34 §6): the unknown verb named, an id with a space said so.
@Suite("Request parsing: messages")
struct RequestParserMessageTests {
    private func message(_ line: String) -> String? {
        if case .failure(let error) = RequestParser.parse(Array(line.utf8)) { return error.message }
        return nil
    }

    @Test func anUnknownVerbIsNamed() {
        #expect(message("FOO") == "unknown verb FOO; try HELP")
        #expect(message("fetch vehicle v-1") == "unknown verb fetch; try HELP")
    }

    /// Escaped to printable ASCII (the backslash too), and cut after 32 bytes.
    @Test func anUnknownVerbIsEscapedAndTruncated() {
        #expect(message("B\u{1B}[2J\\x") == "unknown verb B\\x1b[2J\\x5cx; try HELP")
        #expect(message("caf\u{E9}") == "unknown verb caf\\xc3\\xa9; try HELP")
        let long = String(repeating: "V", count: 200)
        #expect(message(long) == "unknown verb \(String(repeating: "V", count: 32))...; try HELP")
        #expect(
            message(String(repeating: "V", count: 32)) == "unknown verb \(String(repeating: "V", count: 32)); try HELP"
        )
        for line in ["\u{7F}", "\u{1B}]0;title\u{7}", long + "\u{1B}"] {
            let text = message(line) ?? ""
            #expect(text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }, "\(text)")
        }
    }

    @Test func anIDWithASpaceIsSaidToHoldWhitespace() {
        let whitespace = "id contains whitespace, or min-validity is not whole seconds from 0 to 86400"
        #expect(message("GET vehicle my vehicle") == whitespace)
        #expect(message("GET vehicle v-1 abc") == whitespace)
        // A third field that starts like a number was meant as min-validity.
        let minValidity = "min-validity must be whole seconds from 0 to 86400"
        for field in ["86401", "1.5", "-1", "+5", ".5", "5s", "1000000"] {
            #expect(message("GET vehicle v-1 \(field)") == minValidity, "\(field)")
        }
    }

    @Test func aForbiddenCharacterInAnIDNeedsNoEscaping() {
        for id in ["v/1", "v:1", "v\\1", "v?1", "v#1"] {
            #expect(message("GET vehicle \(id)") == "id contains one of / : ? # or a backslash", "\(id)")
        }
    }
}
