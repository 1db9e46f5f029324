import Foundation
import TokenAgent

/// What must hold for any reply a provider sends, checked by the provider-reply fuzzer
/// (`scripts/fuzz provider-replies`) and, over the seed corpus, by `AgentFuzzCorpusTests`.
///
/// A fuzz input is a reply: `<content-type> LF <cache-control> LF <expires> LF <body>`, any of the
/// first three lines empty for "no header" (an input without three LFs is all body, JSON). The
/// agent's reading of it (``ProviderReply``, the caching headers, then ``TokenAcceptance`` for
/// `vehicle`/`v-1`, for a kind with `accept_wildcard` and for a custom kind) must not trap, must
/// end in a ``ProviderError`` or a token, and a token must be printable ASCII, expire after now
/// and no later than the kind's longest lifetime, and, when it is a JWT, carry claims that name
/// exactly the id asked for (or nothing, for the custom kind).
enum ProviderReplyOracle {
    /// The wall time the replies are read at.
    static let now = 1_800_000_000.0

    /// A reply as the fuzzer's bytes describe it.
    struct Reply {
        var contentType: String?
        var cacheControl: String?
        var expires: String?
        var body: [UInt8]
    }

    static func reply(fuzzData data: [UInt8]) -> Reply {
        var lines: [[UInt8]] = []
        var start = 0
        while lines.count < 3, let end = data[start...].firstIndex(of: 0x0A) {
            lines.append(Array(data[start..<end]))
            start = end + 1
        }
        guard lines.count == 3 else { return Reply(contentType: "application/json", body: data) }
        func header(_ bytes: [UInt8]) -> String? { bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
        return Reply(
            contentType: header(lines[0]),
            cacheControl: header(lines[1]),
            expires: header(lines[2]),
            body: Array(data[start...])
        )
    }

    /// The bytes of `reply` as a fuzz input.
    static func fuzzData(_ reply: Reply) -> [UInt8] {
        Array("\(reply.contentType ?? "")\n\(reply.cacheControl ?? "")\n\(reply.expires ?? "")\n".utf8) + reply.body
    }

    /// Everything wrong with how the agent reads `data`; empty when all holds.
    static func problems(fuzzData data: [UInt8]) -> [String] {
        let reply = reply(fuzzData: data)
        var problems: [String] = []
        let headerExpiry = ProviderReply.expiry(cacheControl: reply.cacheControl, expires: reply.expires, now: now)
        let read: (token: String, expiresAt: Double?)
        do {
            read = try ProviderReply().read(
                body: reply.body,
                contentType: reply.contentType,
                headerExpiry: headerExpiry,
                now: now
            )
        } catch is ProviderError {
            return []
        } catch {
            return ["reading threw \(type(of: error)), not a ProviderError"]
        }
        // The acceptance, the key, the claim that must name the id, whether `*` may appear.
        let cases: [(TokenAcceptance, TokenKey, String?, Bool)] = [
            (TokenAcceptance(), TokenKey(kind: "vehicle", id: "v-1"), "vehicleid", false),
            (TokenAcceptance(wildcardKinds: ["vehicle"]), TokenKey(kind: "vehicle", id: "v-1"), "vehicleid", true),
            (TokenAcceptance(maxLifetimes: ["custom": 600]), TokenKey(kind: "custom", id: "c-1"), nil, false),
        ]
        for (acceptance, key, claim, wildcards) in cases {
            let fetched: FetchedToken
            do {
                fetched = try acceptance.accept(token: read.token, expiresAt: read.expiresAt, for: key, now: now)
            } catch is ProviderError {
                continue
            } catch {
                problems.append("\(key): accepting threw \(type(of: error)), not a ProviderError")
                continue
            }
            let left = fetched.expiresAt.seconds - now
            if !(left > 0 && left <= acceptance.maxLifetime(of: key.kind)) {
                problems.append("\(key): accepted with \(left) s left")
            }
            if !fetched.token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
                problems.append("\(key): accepted a token that is not printable ASCII")
            }
            problems += jwtProblems(fetched.token, key: key, claim: claim, wildcards: wildcards)
        }
        return problems
    }

    /// What is wrong with an accepted token that another reader would take for a JWT, judged
    /// without the agent's own reader: Foundation's lenient `JSONSerialization` (which keeps the
    /// last of duplicate keys), so a token the agent's strict reader could not read is judged too.
    static func jwtProblems(_ token: String, key: TokenKey, claim: String?, wildcards: Bool) -> [String] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        // A JWT to another reader: its header is a JSON object.
        guard parts.count == 3, let header = decode(parts[0]),
            (try? JSONSerialization.jsonObject(with: Data(header))) is [String: Any]
        else { return [] }
        guard let payload = decode(parts[1]),
            let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any]
        else {
            return ["\(key): accepted a JWT-shaped token whose payload is not a JSON object"]
        }
        guard let authorization = object["authorization"] else {
            return claim != nil && !wildcards ? ["\(key): accepted a JWT without authorization"] : []
        }
        guard let entries = authorization as? [String: Any] else {
            return ["\(key): accepted an authorization that is not an object"]
        }
        var problems: [String] = []
        if entries.values.contains(where: { !($0 is String) }) {
            problems.append("\(key): accepted a non-string entry")
        }
        let strings = entries.compactMapValues { $0 as? String }
        if !wildcards, strings.values.contains("*") { problems.append("\(key): accepted a wildcard") }
        if let claim {
            let named = entries.filter { $0.key.lowercased() == claim }.map { "\($0.value)" }
            let fits = named.count == 1 && (named[0].utf8.elementsEqual(key.id.utf8) || (wildcards && named[0] == "*"))
            if !fits, !(wildcards && named.isEmpty) { problems.append("\(key): accepted \(claim) = \(named)") }
        }
        return problems
    }

    private static func decode(_ part: Substring) -> [UInt8]? {
        var base64 = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64).map(Array.init)
    }
}
