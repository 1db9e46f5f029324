import TokenWire

/// What a ``FleetTokenClient/warm(_:)`` did at the agent.
public struct WarmResult: Sendable, Hashable {
    /// Subjects whose token is now being fetched (by this call or already before it).
    public var queued: Int
    /// Subjects whose token was already cached.
    public var cached: Int

    /// A result.
    public init(queued: Int = 0, cached: Int = 0) {
        self.queued = queued
        self.cached = cached
    }
}

extension FleetTokenClient {
    /// Asks the agent to fetch the tokens of `subjects` ahead of need (`WARM`), so that the
    /// calls for them later are answered from its cache; returns at once, without waiting for
    /// any fetch.
    ///
    /// The subjects are sent grouped by kind, at most ``WireLimits/maxWarmIDs`` a line (and
    /// within the line limit). Every kind and id is checked first: one that breaks the rules
    /// throws before anything is sent. A subject counted neither queued nor cached was held off
    /// (the agent's back-off or a remembered refusal) or over one of its bounds. The agent fetches
    /// them at the lowest priority: they never delay a token someone waits for.
    public nonisolated(nonsending) func warm(_ subjects: [TokenSubject]) async throws(FleetTokenError) -> WarmResult {
        let requests = Self.warmRequests(subjects)
        for request in requests { try Self.validate(request) }
        var result = WarmResult()
        for request in requests {
            let reply = try await exchange(request)
            guard case .ok(let text) = reply else { throw Self.unexpected(reply) }
            let fields = WireReply.statsFields(text)
            guard let queued = fields["queued"].flatMap({ Int($0) }), let cached = fields["cached"].flatMap({ Int($0) })
            else { throw Self.unexpected(reply) }
            result.queued += queued
            result.cached += cached
        }
        return result
    }

    /// The `WARM` lines for `subjects`: by kind in order of first appearance, each id once, at most
    /// ``WireLimits/maxWarmIDs`` ids and ``WireLimits/maxRequestLineBytes`` bytes a line.
    static func warmRequests(_ subjects: [TokenSubject]) -> [WireRequest] {
        var kinds: [String] = []
        var ids: [String: [String]] = [:]
        var seen: Set<TokenSubject> = []
        for subject in subjects where seen.insert(subject).inserted {
            if ids[subject.kind] == nil { kinds.append(subject.kind) }
            ids[subject.kind, default: []].append(subject.id)
        }
        return kinds.flatMap { kind in
            idLines(verb: "WARM", kind: kind, ids: ids[kind] ?? [], maxIDs: WireLimits.maxWarmIDs).map {
                WireRequest.warm(kind: kind, ids: $0)
            }
        }
    }
}

/// `ids` split, in order, into the id lists of `<verb> <kind> <id> <id> ...` lines of at most
/// `maxIDs` ids and ``WireLimits/maxRequestLineBytes`` bytes each (an id that alone makes a line
/// too long gets a line of its own, for the agent to refuse).
func idLines(verb: String, kind: String, ids: some Sequence<String>, maxIDs: Int = .max) -> [[String]] {
    let prefix = verb.utf8.count + 1 + kind.utf8.count
    var lines: [[String]] = []
    var line: [String] = []
    var bytes = prefix
    for id in ids {
        if !line.isEmpty, line.count == maxIDs || bytes + 1 + id.utf8.count > WireLimits.maxRequestLineBytes {
            lines.append(line)
            line = []
            bytes = prefix
        }
        line.append(id)
        bytes += 1 + id.utf8.count
    }
    if !line.isEmpty { lines.append(line) }
    return lines
}
