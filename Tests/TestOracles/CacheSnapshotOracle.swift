import Foundation
import TokenAgent
import TokenWire

/// What must hold for any bytes found where a cache snapshot should be (the cache file, the fd
/// store), checked by the snapshot fuzzer (`scripts/fuzz --target cache-snapshots`) and, over its
/// seed corpus, by `AgentFuzzCorpusTests`.
///
/// Each input is read twice: as a whole file (``CacheSnapshot/read(_:maxTokens:)``), and as a body framed with its right length and checksum (``CacheSnapshot/frame(_:)``), so
/// that the fuzzer reaches the line reader and the adoption rules without forging SHA-256. Reading
/// must not trap and must end in a refusal or contents; a framed read is only ever of exactly the
/// bytes its header describes; contents re-encode to the same tokens; and every token the adoption
/// rules take (for `vehicle`, a kind with `accept_wildcard`, a custom kind with a lifetime, and the
/// wildcard kind `server`) has an id the wire accepts, the serving floor left, no later expiry than
/// its line said or its kind allows, printable text, and, when any reader would take it for a JWT,
/// claims that name exactly its id (``ProviderReplyOracle/jwtProblems(_:key:claim:wildcards:)``).
enum CacheSnapshotOracle {
    /// The wall time the snapshots are read at.
    static let now = 1_800_000_000.0

    /// The adoption rules the tokens are judged by, with the claim each kind's id is under and
    /// whether it accepts wildcards.
    static let kinds: [(kind: String, claim: String?, wildcards: Bool)] = [
        ("vehicle", "vehicleid", false), ("trip", "tripid", true), ("custom", nil, false), ("server", nil, true),
    ]
    static let acceptance = TokenAcceptance(wildcardKinds: ["trip", "server"], maxLifetimes: ["custom": 600])

    /// Everything wrong with how the agent reads `data`; empty when all holds.
    static func problems(fuzzData data: [UInt8]) -> [String] {
        var problems: [String] = []
        problems += check(data, framedByOracle: false)
        problems += check(CacheSnapshot.frame(data).bytes, framedByOracle: true)
        return problems
    }

    private static func check(_ bytes: [UInt8], framedByOracle: Bool) -> [String] {
        let contents: CacheSnapshot.Contents
        do {
            contents = try CacheSnapshot.read(bytes)
        } catch {
            return framedByOracle && !bytes.isEmpty ? ["a body framed right was refused: \(error)"] : []
        }
        var problems: [String] = []
        switch contents.formatVersion {
        case 3:
            // Framed: exactly the bytes its header describes, whose checksum it gives.
            let body = Array(bytes.dropFirst(CacheSnapshot.headerBytes))
            if CacheSnapshot.frame(body).bytes != bytes {
                problems.append("read a framed snapshot its header does not describe")
            }
        default:
            problems.append("read format version \(contents.formatVersion)")
        }
        for token in contents.tokens {
            for field in [token.kind, token.id, token.token]
            where field.isEmpty || field.utf8.contains(where: { $0 == 0x09 || $0 == 0x0A }) {
                problems.append("read a token with an empty field or a tab or line feed in one")
            }
        }
        if let version = contents.agentVersion,
            version.utf8.count > 64 || !version.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        {
            problems.append("read an agent version that is not short printable text")
        }
        problems += roundTrip(contents)
        problems += adoption(contents)
        return problems
    }

    /// Contents written again read back the same (tokens, providers, agent version).
    private static func roundTrip(_ contents: CacheSnapshot.Contents) -> [String] {
        var builder = CacheSnapshot.Builder(providers: contents.providers, agentVersion: contents.agentVersion ?? "x")
        builder.append(contentsOf: contents.tokens)
        let encoded = builder.finish()
        guard let again = try? CacheSnapshot.read(encoded.bytes) else { return ["re-encoded contents are refused"] }
        var problems: [String] = []
        // A carriage return is the one byte a line may hold that the writer leaves out.
        let kept = contents.tokens.filter { token in
            ![token.kind, token.id, token.token].contains { $0.utf8.contains(0x0D) }
        }
        if again.tokens.count != encoded.tokenCount || encoded.tokenCount + encoded.leftOut != contents.tokens.count {
            problems.append(
                "re-encoding counted \(encoded.tokenCount) + \(encoded.leftOut) of \(contents.tokens.count)"
            )
        }
        if again.tokens != kept {
            problems.append("re-encoded tokens differ")
        }
        return problems
    }

    /// Every token the adoption rules take is one a provider's reply could have carried for its key.
    private static func adoption(_ contents: CacheSnapshot.Contents) -> [String] {
        var digests: [String: String] = [:]
        for (kind, _, _) in kinds { digests[kind] = contents.providers[kind] ?? "none" }
        let rules = SnapshotAdoption(digests: digests, acceptance: acceptance)
        let (tokens, counts) = rules.filter(contents, now: now)
        var problems: [String] = []
        if counts.total != contents.tokens.count + contents.malformedLines || counts.adopted != tokens.count {
            problems.append("adoption counts \(counts) for \(contents.tokens.count) tokens")
        }
        for token in tokens {
            let key = TokenKey(kind: token.kind, id: token.id)
            guard let rule = kinds.first(where: { $0.kind == token.kind }) else {
                problems.append("\(key): adopted a token of an unknown kind")
                continue
            }
            if contents.providers[token.kind] != digests[token.kind] {
                problems.append("\(key): adopted across providers")
            }
            if TokenIdentifier.problem(kind: token.kind, id: Substring(token.id)) != nil {
                problems.append("\(key): adopted an id the wire refuses")
            }
            let left = Double(token.expiresAt) - now
            if !(left >= RefreshPolicy().servingFloor && left <= acceptance.maxLifetime(of: token.kind)) {
                problems.append("\(key): adopted with \(left) s left")
            }
            let lines = contents.tokens.filter { $0.kind == token.kind && $0.id == token.id && $0.token == token.token }
            if !lines.contains(where: { $0.expiresAt >= token.expiresAt }) {
                problems.append("\(key): adopted with a later expiry than its line")
            }
            if !token.token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) || token.token.utf8.count > 16 * 1024 {
                problems.append("\(key): adopted a token that is not printable ASCII")
            }
            problems += ProviderReplyOracle.jwtProblems(
                token.token,
                key: key,
                claim: rule.claim,
                wildcards: rule.wildcards
            )
        }
        return problems
    }
}
