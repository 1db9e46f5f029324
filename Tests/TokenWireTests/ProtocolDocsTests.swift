import Foundation
import TestSupport
import Testing
import TokenWire

/// The verbs and error codes the documents name, against `TokenWire`'s: PROTOCOL.md (its request
/// table, a section per verb, the error table), the README's protocol table and error sentence,
/// every `HELP` reply the documents show, and the man page's PROTOCOL section. Each list is read
/// from the document itself, so renaming, adding or removing a verb or a code on one side fails.
@Suite("Protocol docs")
struct ProtocolDocsTests {
    private let verbs = WireRequest.verbs
    private let codes = WireErrorCode.allCases.map(\.rawValue)

    /// The documents that may show replies; `ERR <code>` in any of them must be a real code: the
    /// README, the man page, every document in docs/ and every article of the DocC catalogs, so a
    /// section that moves between documents stays checked.
    private static func documents() throws -> [String] {
        try ["README.md", "packaging/man/fleet-tokend.8"] + DocText.docs() + DocText.catalogArticles()
    }

    @Test func theDocumentsCheckedIncludeEveryOneThatShowsReplies() throws {
        let documents = try Self.documents()
        for document in [
            "docs/PROTOCOL.md", "docs/CONFIG.md", "docs/SHM.md", "docs/RELIABILITY.md", "docs/DESIGN.md",
            "docs/OPERATIONS.md", "Sources/FleetTokenClient/FleetTokenClient.docc/FleetTokenClient.md",
            "Sources/FleetTokenClient/FleetTokenClient.docc/ReplacingAnHTTPTokenFetcher.md",
        ] {
            #expect(documents.contains(document), "\(document) is not checked")
        }
    }

    /// The verb a request cell starts with: `GET <kind> <id>` → `GET`.
    private func verb(ofRequest cell: String) -> String? {
        DocText.codeSpans(cell).first?.split(separator: " ").first.map(String.init)
    }

    /// `expected` once each, in any order, and nothing else.
    private func expectSame(
        _ found: [String],
        _ expected: [String],
        _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        DocText.expectSame(
            found,
            expected,
            what,
            missing: { "missing \($0)" },
            unknown: { "not in TokenWire: \($0)" },
            sourceLocation: sourceLocation
        )
    }

    @Test func theParserKnowsEveryListedVerbAndNoOther() {
        for verb in WireRequest.Verb.allCases {
            for spelling in [verb.rawValue, verb.rawValue.lowercased()] {
                if case .failure(let error) = RequestParser.parse(text: spelling) {
                    #expect(!error.message.hasPrefix("unknown verb"), "\(spelling)")
                }
            }
        }
        // A verb that is not in the list is unknown, however close to one it is.
        for line in ["FETCH vehicle v-1", "GETS vehicle v-1", "HELPS", "INFOS vehicle v-1"] {
            let verb = line.split(separator: " ")[0]
            #expect(
                RequestParser.parse(text: line) == .failure(WireError(.badRequest, "unknown verb \(verb); try HELP"))
            )
        }
        let samples: [WireRequest] = [
            .get(kind: "vehicle", id: "v-1", minValiditySeconds: 60), .refresh(kind: "trip", id: "t-1"),
            .drop(kind: "trip", id: "t-1"), .info(kind: "vehicle", id: "v-1"), .ping, .stats, .metrics, .help,
            .quit, .shm(kind: "vehicle"), .touch(kind: "vehicle", ids: ["v-1", "v-2"]),
            .warm(kind: "trip", ids: ["t-1"]),
        ]
        expectSame(samples.map(\.verb.rawValue), verbs, "one sample request per verb")
        for request in samples {
            #expect(RequestParser.parse(text: request.line) == .success(request), "\(request.line)")
            #expect(request.line.hasPrefix(request.verb.rawValue))
        }
    }

    @Test func protocolMdHasARequestRowAndASectionPerVerb() throws {
        let text = try DocText.read("docs/PROTOCOL.md")
        let section = try #require(DocText.section("Requests and replies", in: text))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Request" })
        expectSame(table.rows.compactMap { verb(ofRequest: $0[0]) }, verbs, "PROTOCOL.md request table")
        let verbSections = DocText.sections(text).filter { $0.level == 3 }.map(\.title)
            .filter { !$0.isEmpty && $0.allSatisfy { $0.isUppercase } }
        expectSame(verbSections, verbs, "PROTOCOL.md sections named by a verb")
    }

    @Test func protocolMdErrorTableHasEveryCode() throws {
        let text = try DocText.read("docs/PROTOCOL.md")
        let section = try #require(DocText.section("Errors", in: text))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Code" })
        expectSame(table.rows.compactMap { DocText.codeSpans($0[0]).first }, codes, "PROTOCOL.md error table")
    }

    /// The parser's `bad-request` texts for each verb's wrong field counts (`usage: …`, `… takes no
    /// arguments`) are in PROTOCOL.md's error table.
    @Test func everyUsageTextIsInTheErrorTable() throws {
        let text = try DocText.read("docs/PROTOCOL.md")
        let section = try #require(DocText.section("Errors", in: text))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Code" })
        let row = try #require(table.rows.first { DocText.codeSpans($0[0]).first == "bad-request" })
        let texts = try #require(table.column("Texts")?[table.rows.firstIndex { $0 == row } ?? 0])
        let spans = DocText.codeSpans(texts)
        for verb in WireRequest.Verb.allCases {
            for line in [verb.rawValue, verb.rawValue + " a b c d e f"] {
                guard case .failure(let error) = RequestParser.parse(text: line), error.code == .badRequest else {
                    continue
                }
                let tooMany = " (too many fields: an id cannot contain whitespace)"
                if error.message.hasSuffix(tooMany) {
                    let usage = String(error.message.dropLast(tooMany.count))
                    #expect(spans.contains(usage) && spans.contains(String(tooMany.dropFirst())), "\(line)")
                } else if error.message == "\(verb.rawValue) takes no arguments" {
                    #expect(spans.contains("<VERB> takes no arguments") && spans.contains(verb.rawValue), "\(line)")
                } else {
                    #expect(spans.contains(error.message), "`\(error.message)` (to `\(line)`) is not in PROTOCOL.md")
                }
            }
        }
    }

    @Test func readmeProtocolTableAndErrorSentence() throws {
        let text = try DocText.read("README.md")
        let section = try #require(DocText.section("The protocol", in: text))
        let table = try #require(DocText.tables(section).first { $0.header.first == "request" })
        expectSame(table.rows.compactMap { verb(ofRequest: $0[0]) }, verbs, "README protocol table")
        let paragraph = section.joined(separator: "\n").components(separatedBy: "\n\n")
            .first { $0.contains("Errors are `ERR <code> <text>`") }
        let spans = DocText.codeSpans(try #require(paragraph, "README: no 'Errors are `ERR <code> <text>`' paragraph"))
        // The codes follow "with code", up to the end of their sentence.
        let sentence = try #require(paragraph?.components(separatedBy: "with code").dropFirst().first)
        let listed = DocText.codeSpans(String(sentence.prefix { $0 != "." }))
        #expect(spans.count > listed.count)
        expectSame(listed, codes, "README error codes")
    }

    @Test func everyHelpReplyShownListsTheVerbs() throws {
        // `OK GET REFRESH …`: the HELP reply wherever a document shows it.
        let pattern = try Regex(#"OK((?: [A-Z]{2,})+)"#)
        for document in try Self.documents() {
            let text = try DocText.read(document)
            var shown = 0
            for match in text.matches(of: pattern) {
                let listed = String(text[match.range]).split(separator: " ").dropFirst().map(String.init)
                // Replies such as `OK entries=…` never match; a run of upper-case words after OK
                // that starts with a verb is a HELP reply.
                guard listed.count > 2, listed.first == "GET" else { continue }
                shown += 1
                #expect(listed == verbs, "\(document): HELP reply `OK \(listed.joined(separator: " "))`")
            }
            if ["README.md", "docs/PROTOCOL.md", "packaging/man/fleet-tokend.8"].contains(document) {
                #expect(shown > 0, "\(document) shows no HELP reply")
            }
        }
    }

    @Test func everyErrorReplyShownHasARealCode() throws {
        let pattern = try Regex(#"ERR ([a-z][a-z-]*)"#)
        for document in try Self.documents() {
            let text = DocText.unroff(try DocText.read(document))
            for match in text.matches(of: pattern) {
                let code = String(text[match.range].dropFirst(4))
                #expect(codes.contains(code), "\(document): `ERR \(code)` is not a code of TokenWire")
            }
        }
    }

    @Test func manPageListsEveryVerbAndCode() throws {
        let page = try DocText.read("packaging/man/fleet-tokend.8")
        let lines = page.components(separatedBy: "\n")
        let start = try #require(lines.firstIndex(of: ".SH PROTOCOL"), "the man page has no PROTOCOL section")
        let section = lines[(start + 1)...].prefix { !$0.hasPrefix(".SH ") }
        // Each verb is a tagged paragraph: `.TP`, then a line starting with the verb in bold.
        var listed: [String] = []
        for (index, line) in zip(section.indices, section) where line == ".TP" && index + 1 < section.endIndex {
            // The tag line, without a leading font macro (`.B GET …`) and its quotes.
            var words = DocText.unroff(section[index + 1]).split(separator: " ")
            if words.first?.hasPrefix(".") == true { words.removeFirst() }
            if let word = words.first { listed.append(word.replacingOccurrences(of: "\"", with: "")) }
        }
        expectSame(listed, verbs, "man page PROTOCOL section")
        let text = DocText.unroff(section.joined(separator: " "))
        let sentence = try #require(
            text.components(separatedBy: "with code ").dropFirst().first?.prefix { $0 != "." },
            "the man page's PROTOCOL section has no 'with code …' sentence"
        )
        let named = sentence.replacingOccurrences(of: " or ", with: ", ").components(separatedBy: ",")
            .map { $0.trimmingCharacters(in: .whitespaces) }
        expectSame(named, codes, "man page error codes")
    }
}
