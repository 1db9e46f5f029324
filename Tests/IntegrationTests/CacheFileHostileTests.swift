import Foundation
import TestSupport
import Testing
import TokenAgent

/// Cache files an agent must not trust, against the real agent: each starts it cold or skips
/// exactly the tokens it should, never crashes it, and never makes it serve a wrong token.
@Suite("Cache file: hostile files")
struct CacheFileHostileTests {
    /// A real file: what an agent serving `vehicle` and `trip` from `provider` wrote at its stop,
    /// holding `h-1` and `h-2`, and their tokens.
    static func realFile(_ setup: CacheFileSetup, _ provider: FakeTokenProvider) async throws -> [String: String] {
        let agent = try await AgentProcess(setup.arguments(provider))
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        var tokens: [String: String] = [:]
        for id in ["h-1", "h-2"] { tokens[id] = tokenOf(try await agent.send("GET vehicle \(id)").first) }
        #expect(await agent.stop() == 0)
        return tokens
    }

    /// Starts an agent on the cache file as it now is, checks it refused the file for `reason`
    /// and serves freshly fetched tokens (the provider asked once more for each), then stops it.
    static func expectRefused(
        _ setup: CacheFileSetup,
        _ provider: FakeTokenProvider,
        _ tokens: [String: String],
        reason: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let before = tokens.keys.map { provider.requests(for: $0) }
        let agent = try await AgentProcess(setup.arguments(provider))
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(agent.log.contains("cache file refused: starting cold"), "\(agent.log)", sourceLocation: sourceLocation)
        #expect(agent.log.contains(reason), "wanted \(reason) in \(agent.log)", sourceLocation: sourceLocation)
        for (index, id) in tokens.keys.enumerated() {
            let served = tokenOf(try await agent.send("GET vehicle \(id)").first)
            #expect(served != nil && served != tokens[id], "\(id) fetched anew", sourceLocation: sourceLocation)
            #expect(provider.requests(for: id) == before[index] + 1, sourceLocation: sourceLocation)
        }
        #expect((try await agent.stats())["snapshot_adopted"] == 0, sourceLocation: sourceLocation)
        #expect(await agent.stop() == 0, "no crash", sourceLocation: sourceLocation)
    }

    @Test func filesRefusedAsAWholeStartTheAgentCold() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let tokens = try await Self.realFile(setup, provider)
        let good = try setup.bytes()

        // A symbolic link to a good file: not followed, and replaced by a file of the agent's own.
        let elsewhere = setup.directory + "/elsewhere.cache"
        try setup.write(good)
        try FileManager.default.moveItem(atPath: setup.path, toPath: elsewhere)
        try FileManager.default.createSymbolicLink(atPath: setup.path, withDestinationPath: elsewhere)
        try await Self.expectRefused(setup, provider, tokens, reason: "is a symbolic link")
        #expect(try Data(contentsOf: URL(fileURLWithPath: elsewhere)) == Data(good), "the link's target is untouched")
        #expect(setup.status().map { $0.st_mode & S_IFMT == S_IFREG } == true, "the link was replaced")

        var cases: [(String, () throws -> Void)] = [
            ("has mode 0644", { try setup.write(good, mode: 0o644) }),
            ("truncated", { try setup.write(Array(good.dropLast())) }),
            ("checksum mismatch", { try setup.write(Self.flipping(good, at: good.count - 10)) }),
            ("format version 4", { try setup.write(Array("fleet-tokend-cache v4\n".utf8) + good.dropFirst(22)) }),
            ("format version 2", { try setup.write(Array("fleet-tokend-cache v2\n".utf8) + good.dropFirst(122)) }),
            ("not a cache snapshot", { try setup.write(Array("{\"tokens\": []}\n".utf8)) }),
            (
                "over the limit",
                {
                    try setup.write(good)
                    #expect(truncate(setup.path, off_t(CacheSnapshot.maxBytes + 1)) == 0)  // sparse: no memory
                }
            ),
        ]
        // A FIFO, a device or a socket in the file's place stops the start (exit 78): a write
        // would replace it (CacheFilePlacementTests).
        if geteuid() == 0 {
            cases.append(
                (
                    "is owned by uid 65534",
                    {
                        try setup.write(good)
                        #expect(chown(setup.path, 65534, 65534) == 0)
                    }
                )
            )
        }
        for (reason, make) in cases {
            try make()
            try await Self.expectRefused(setup, provider, tokens, reason: reason)
        }
    }

    /// A well-formed file (right length and checksum) whose tokens are wrong: each is skipped,
    /// counted, and fetched anew; the good ones beside them are taken.
    @Test func wrongTokensInAWellFormedFileAreSkippedOneByOne() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let tokens = try await Self.realFile(setup, provider)
        let written = try setup.contents()
        let now = Int64(Date().timeIntervalSince1970)
        let kept = try #require(written.tokens.first { $0.id == "h-1" })
        var builder = CacheSnapshot.Builder(providers: written.providers)
        builder.append(kept)
        // Another id's real token under this id: refused by its claim.
        builder.append(CachedToken(kind: "vehicle", id: "w-claim", token: tokens["h-2"]!, expiresAt: now + 3000))
        // A token for this id that has expired, its line claiming otherwise: refused by its exp.
        let expired = FakeTokenProvider.jwt(["exp": now - 60, "authorization": ["vehicleid": "w-expired"]])
        builder.append(CachedToken(kind: "vehicle", id: "w-expired", token: expired, expiresAt: now + 3000))
        // Five seconds left: under the serving floor.
        let dying = FakeTokenProvider.jwt(["exp": now + 5, "authorization": ["vehicleid": "w-dying"]])
        builder.append(CachedToken(kind: "vehicle", id: "w-dying", token: dying, expiresAt: now + 5))
        // Fleet Engine's wildcard in the claim.
        let wildcard = FakeTokenProvider.jwt(["exp": now + 3000, "authorization": ["vehicleid": "*"]])
        builder.append(CachedToken(kind: "vehicle", id: "w-star", token: wildcard, expiresAt: now + 3000))
        try setup.write(builder.finish().bytes)

        let agent = try await AgentProcess(setup.arguments(provider))
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(logField(agent.log, "cache taken over", "tokens") == "1", "\(agent.log)")
        #expect(logField(agent.log, "cache taken over", "tokens_expired") == "1")
        #expect(logField(agent.log, "cache taken over", "tokens_refused") == "3")
        #expect(tokenOf(try await agent.send("GET vehicle h-1").first) == kept.token)
        #expect(provider.requests(for: "h-1") == 1)
        for id in ["w-claim", "w-expired", "w-dying", "w-star"] {
            let served = try #require(tokenOf(try await agent.send("GET vehicle \(id)").first), "\(id)")
            #expect(![tokens["h-2"], expired, dying, wildcard].contains(served), "\(id): never the file's token")
            #expect(provider.requests(for: id) == 1, "\(id) fetched")
        }
        let stats = try await agent.stats()
        #expect(stats["snapshot_adopted"] == 1 && stats["snapshot_skipped"] == 4)
        #expect(await agent.stop() == 0)
    }

    /// Tokens made by another provider (here another `max_lifetime`) are not taken.
    @Test func aChangedProviderTakesNoneOfItsKindsTokens() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        _ = try await Self.realFile(setup, provider)
        let config = setup.directory + "/other.json"
        try #"""
        {"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))", "max_lifetime": 600},
                       "trip": {"url": "\#(provider.url(kind: "trip"))"}},
         "cache_file": "\#(setup.path)"}
        """#.write(toFile: config, atomically: true, encoding: .utf8)
        let agent = try await AgentProcess(["--config", config])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(logField(agent.log, "cache taken over", "tokens_of_changed_providers") == "2", "\(agent.log)")
        #expect(logField(agent.log, "cache taken over", "tokens") == "0")
        let reply = try await agent.send("GET vehicle h-1").first
        _ = try #require(tokenOf(reply), "GET vehicle h-1 answered \(reply ?? "nothing"); the log: \(agent.log)")
        #expect(provider.requests(for: "h-1") == 2, "fetched from the provider now configured")
        #expect(await agent.stop() == 0)
    }

    static func flipping(_ bytes: [UInt8], at index: Int) -> [UInt8] {
        var copy = bytes
        copy[index] ^= 0x01
        return copy
    }
}
