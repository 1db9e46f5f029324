import FakeGoogle
import Foundation
import TestSupport
import Testing

/// The fields of the agent's real `STATS` and `INFO` replies against PROTOCOL.md's tables of
/// them, both ways and in the documented order.
@Suite("Reply fields docs")
struct ReplyFieldsDocsTests {
    /// The first code span of each row's first cell (all of them when it holds several).
    static func fields(_ table: DocText.Table) -> [String] {
        table.rows.flatMap { DocText.codeSpans($0[0]) }
    }

    /// The names of a `name=value …` reply after `OK`; `last_error`'s value runs to the end.
    static func names(_ reply: String) -> [String] {
        var names: [String] = []
        for field in reply.split(separator: " ").dropFirst() {
            guard let equals = field.firstIndex(of: "=") else { continue }
            names.append(String(field[..<equals]))
            if names.last == "last_error" { break }
        }
        return names
    }

    private func section(_ title: String) throws -> [String] {
        try #require(DocText.section(title, in: try DocText.read("docs/PROTOCOL.md")), "PROTOCOL.md: no \(title)")
    }

    @Test func infoFieldsAreTheDocumentedOnesInOrder() async throws {
        let table = try #require(DocText.tables(try section("INFO")).first { $0.header.first == "Field" })
        let agent = try await AgentProcess(["--demo"])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let replies = try await agent.send("GET vehicle v-1", "INFO vehicle v-1", "INFO vehicle v-2")
        await agent.stop()
        #expect(Self.names(replies[1]) == Self.fields(table), "INFO reply: \(replies[1])")
        #expect(replies[2] == "OK cached=no")
    }

    @Test func statsFieldsAreTheDocumentedOnes() async throws {
        let tables = DocText.tables(try section("STATS")).filter { $0.header.first == "Field" }
        try #require(tables.count == 2, "PROTOCOL.md STATS: the required fields' table and the further fields' table")
        // `signs_<kind>` and the like stand for one field per kind with a signature budget: none
        // of the kinds these agents serve has one (SignatureBudgetDocsTests shows them).
        let further = Self.fields(tables[1])
        let perKind = further.filter { $0.hasSuffix("<kind>") }.map { String($0.dropLast("<kind>".count)) }
        var seen: Set<String> = []
        for arguments in [["--demo"], ["--demo", "--no-shared-memory"]] {
            let agent = try await AgentProcess(arguments)
            defer { try? FileManager.default.removeItem(at: agent.directory) }
            let reply = try #require(try await agent.send("STATS").first)
            await agent.stop()
            let names = Self.names(reply)
            // The required fields first, in their order; then the further ones.
            #expect(Array(names.prefix(tables[0].rows.count)) == Self.fields(tables[0]), "\(arguments): \(reply)")
            let sent = Set(names.dropFirst(tables[0].rows.count))
            let undocumented = sent.subtracting(further).filter { name in !perKind.contains { name.hasPrefix($0) } }
            #expect(undocumented.isEmpty, "STATS fields \(arguments) not in PROTOCOL.md: \(undocumented.sorted())")
            seen.formUnion(sent)
        }
        // The metadata endpoint's fields come only with the endpoint: an access-token agent's.
        let fake = try await AccessTokenAgent.fake()
        let (agent, _) = try await MetadataAgent.start(
            fake,
            entries: #""fleet-admin": \#(AccessTokenAgent.entry(AccessTokenAgent.admin))"#
        )
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let reply = try #require(try await agent.send("STATS").first)
        await agent.stop()
        await fake.stop()
        let sent = Set(Self.names(reply).dropFirst(tables[0].rows.count))
        let undocumented = sent.subtracting(further).filter { name in !perKind.contains { name.hasPrefix($0) } }
        #expect(undocumented.isEmpty, "STATS fields with the metadata endpoint not in PROTOCOL.md: \(undocumented)")
        seen.formUnion(sent)
        let neverSent = Set(further.filter { !$0.hasSuffix("<kind>") }).subtracting(seen).sorted()
        #expect(neverSent.isEmpty, "PROTOCOL.md STATS fields the agent never sends: \(neverSent)")
    }
}
