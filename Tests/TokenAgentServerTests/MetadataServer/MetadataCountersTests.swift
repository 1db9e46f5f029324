import LoopbackPeer
import MetadataEndpoint
import TestSupport
import Testing
import TokenAgentServer

/// The endpoint's counts (STATS `metadata_*`, `fleet_tokend_metadata_*`), over real HTTP on
/// loopback: each answer moves its own outcome's count and no other; each way the endpoint
/// closes a connection moves its own.
@Suite struct MetadataCountersTests {
    typealias Fixture = MetadataServerFixture
    static let accounts = "/computeMetadata/v1/instance/service-accounts/"
    static let tokenPath = accounts + "default/token"

    /// A request for `target` that asks the server to close after its answer.
    static func request(
        _ address: MetadataListenAddress,
        _ target: String,
        method: String = "GET",
        host: String? = nil,
        fields: [String] = ["Metadata-Flavor: Google"]
    ) -> [UInt8] {
        let head = "\(method) \(target) HTTP/1.1\r\nHost: \(host ?? address.description)\r\n"
        return Array((head + fields.map { $0 + "\r\n" }.joined() + "Connection: close\r\n\r\n").utf8)
    }

    /// Sends `request` on a new connection; the status of the answer, read until the close.
    static func status(_ address: MetadataListenAddress, _ request: [UInt8]) async throws -> Int {
        let client = try LoopbackSocket.connect(to: address.host, port: address.port)
        client.send(request)
        let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
        let text = String(decoding: outcome.bytes, as: UTF8.self)
        let words = text.prefix { $0 != "\r" }.split(separator: " ")
        return try #require(words.count >= 2 ? Int(words[1]) : nil, "no answer: \(text)")
    }

    /// `counts` with nothing closed by the endpoint and nothing refused.
    static func noClosures(_ counts: MetadataStatistics.Counts) -> Bool {
        counts.refused == 0 && counts.closed.allSatisfy { $0 == 0 }
    }

    @Test func eachAnswerMovesItsOwnOutcome() async throws {
        try await Fixture.withCountedServer { address, tokens, statistics async throws in
            let nobodyEmail = Self.accounts + Fixture.nobodyAccount + "/email"
            let foreignScope = Self.tokenPath + "?scopes=https://www.googleapis.com/auth/devstorage.full_control"
            let cases: [(request: [UInt8], outcome: MetadataOutcome)] = [
                (Self.request(address, Self.tokenPath), .token),
                (Self.request(address, Self.tokenPath, method: "HEAD"), .token),
                (Self.request(address, "/"), .ok),
                (Self.request(address, Self.accounts + "default/email"), .ok),
                (Self.request(address, "/?wait_for_change=true"), .badRequest),
                (Self.request(address, Self.tokenPath, host: "evil.example:\(address.port)"), .refusedHost),
                (
                    Self.request(
                        address,
                        Self.tokenPath,
                        fields: ["Metadata-Flavor: Google", "Forwarded: for=1.2.3.4"]
                    ),
                    .refusedForwarded
                ),
                (
                    Self.request(address, "/", fields: ["Metadata-Flavor: Google", "X-Forwarded-For: 10.0.0.1"]),
                    .refusedForwarded
                ),
                (Self.request(address, Self.tokenPath, fields: []), .refusedFlavor),
                (Self.request(address, nobodyEmail), .refusedRules),
                (Self.request(address, foreignScope), .refusedScopes),
                (Self.request(address, "/computeMetadata/v1/instance/zone"), .notFound),
                (Self.request(address, Self.tokenPath, method: "DELETE"), .badMethod),
            ]
            var expected = statistics.counts.answers
            #expect(expected.allSatisfy { $0 == 0 })
            for (request, outcome) in cases {
                #expect(try await Self.status(address, request) == outcome.status, "\(outcome)")
                expected[outcome.rawValue] += 1
                #expect(statistics.counts.answers == expected, "after an answer of \(outcome)")
            }
            tokens.setFailing(true)
            #expect(try await Self.status(address, Self.request(address, Self.tokenPath)) == 503)
            expected[MetadataOutcome.unavailable.rawValue] += 1
            #expect(statistics.counts.answers == expected)
            #expect(tokens.calls == 3, "two tokens (GET and HEAD) and the failure")

            // One connection each, all closed by now; none closed by the endpoint's limits.
            #expect(await eventually { statistics.counts.open == 0 })
            let counts = statistics.counts
            #expect(counts.accepted == cases.count + 1)
            #expect(Self.noClosures(counts), "\(counts)")
            #expect(counts.listen == address)
        }
    }

    @Test func anUnidentifiedPeerIsCountedAsSuch() async throws {
        try await Fixture.withCountedServer(resolver: Unidentified()) { address, tokens, statistics async throws in
            #expect(try await Self.status(address, Self.request(address, Self.tokenPath)) == 403)
            #expect(try await Self.status(address, Self.request(address, Self.accounts)) == 403)
            // The paths that answer anyone are still answered.
            #expect(try await Self.status(address, Self.request(address, "/")) == 200)
            var expected = [Int](repeating: 0, count: MetadataOutcome.allCases.count)
            expected[MetadataOutcome.refusedPeer.rawValue] = 2
            expected[MetadataOutcome.ok.rawValue] = 1
            #expect(statistics.counts.answers == expected)
            #expect(tokens.calls == 0)
        }
    }

    @Test func aHeadTimeoutIsCountedAndAnsweredNothing() async throws {
        try await Fixture.withCountedServer(limits: Fixture.shortHeadTimeout) { address, _, statistics async throws in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            client.send(Array("GET / HTTP/1.1\r\nHost: ".utf8))
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            #expect(outcome.closed && outcome.bytes.isEmpty)
            #expect(await eventually { statistics.counts.open == 0 })
            let counts = statistics.counts
            #expect(counts.closed(.headTimeout) == 1)
            #expect(counts.closed.reduce(0, +) == 1, "\(counts)")
            #expect(counts.answers.allSatisfy { $0 == 0 })
            #expect(counts.accepted == 1 && counts.refused == 0)
        }
    }

    @Test func anIdleConnectionIsCounted() async throws {
        var limits = Fixture.testLimits
        limits.idleTimeout = .seconds(1)
        try await Fixture.withCountedServer(limits: limits) { address, _, statistics async throws in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            #expect(outcome.closed)
            #expect(await eventually { statistics.counts.closed(.idleTimeout) == 1 })
            let counts = statistics.counts
            #expect(counts.closed.reduce(0, +) == 1, "\(counts)")
            #expect(counts.answers.allSatisfy { $0 == 0 })
        }
    }

    @Test func aRequestPastTheByteLimitIsCounted() async throws {
        var limits = Fixture.testLimits
        limits.maxRequestBytes = 4096
        try await Fixture.withCountedServer(limits: limits) { address, _, statistics async throws in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            let filler = String(repeating: "a", count: 8192)
            client.send(Array("GET / HTTP/1.1\r\nHost: \(address)\r\nX-Filler: \(filler)\r\n\r\n".utf8))
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            #expect(outcome.closed)
            #expect(await eventually { statistics.counts.open == 0 })
            let counts = statistics.counts
            #expect(counts.closed(.tooLarge) == 1)
            #expect(counts.closed.reduce(0, +) == 1, "\(counts)")
            #expect(counts.answers.allSatisfy { $0 == 0 })
        }
    }

    /// At the cap of one: a second connection evicts the first (waiting); a third, while the
    /// second is being answered (a slow token), is refused.
    @Test func evictionsAndRefusalsAtTheCapAreCounted() async throws {
        var limits = Fixture.testLimits
        limits.maxConnections = 1
        try await Fixture.withCountedServer(limits: limits) { address, tokens, statistics async throws in
            let first = try LoopbackSocket.connect(to: address.host, port: address.port)
            #expect(await eventually { statistics.counts.accepted == 1 })
            let second = try LoopbackSocket.connect(to: address.host, port: address.port)
            let evicted = try await offPool { first.readUntilClosed(timeout: hangLimit) }
            #expect(evicted.closed && evicted.bytes.isEmpty)
            #expect(statistics.counts.closed(.evicted) == 1)
            #expect(statistics.counts.accepted == 2)

            tokens.setDelay(.seconds(4))
            second.send(Self.request(address, Self.tokenPath))
            // The token is being fetched: the second connection is being answered.
            #expect(await eventually { tokens.calls == 1 })
            let third = try LoopbackSocket.connect(to: address.host, port: address.port)
            let refused = try await offPool { third.readUntilClosed(timeout: hangLimit) }
            #expect(refused.closed && refused.bytes.isEmpty)
            #expect(await eventually { statistics.counts.refused == 1 })

            let answered = try await offPool { second.readUntilClosed(timeout: hangLimit) }
            #expect(String(decoding: answered.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK"))
            #expect(await eventually { statistics.counts.open == 0 })
            let counts = statistics.counts
            #expect(counts.accepted == 2, "the refused one is not admitted")
            #expect(counts.answers(.token) == 1)
            #expect(counts.answers.reduce(0, +) == 1)
            #expect(counts.closed(.evicted) == 1)
            #expect(counts.closed.reduce(0, +) == 1, "\(counts)")
        }
    }
}

/// A resolver that never names the peer.
private struct Unidentified: MetadataPeerResolver {
    func peer(client: IPEndpoint, server: IPEndpoint) -> MetadataPeer {
        .unidentified(reason: "the test's resolver names nobody")
    }
}
