#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Answers the GCE metadata paths Google's auth libraries call for a service account's token,
/// from the agent's access-token entries: a pure function of the request, the peer and the
/// token source (no sockets, no logging).
///
/// Every request is checked, in this order, and refused with 403 when it fails: its `Host` (and
/// an absolute-form target's authority) must name this endpoint (``HostCheck``); it must carry no
/// `X-Forwarded-For` or `Forwarded` field (a proxy's request: the peer is not the asker); it must
/// carry `Metadata-Flavor: Google`. Then a method other than `GET` or `HEAD` is 405. Every
/// answer carries `Metadata-Flavor: Google` and no CORS field.
///
/// The paths under `instance/service-accounts/` answer only a peer the kernel identified
/// (``MetadataPeer/user(_:)``) whom the entry's rules allow; the rest (`/`, the directories,
/// `project/project-id`, `universe/universe-domain`) answer anyone. A token is checked twice:
/// against the entry's rules when asked for, and against the rules in force (``entriesInForce``,
/// a reload's) when it comes, as the socket checks a reply still owed when it writes it.
public struct MetadataRouter: Sendable {
    /// The settings: the listen address (for the `Host` check), the default entry, the project.
    public let configuration: MetadataServerConfiguration
    let tokens: any MetadataTokenSource
    let now: @Sendable () -> Double
    /// The entries in force now: a reload may have replaced this router's `tokens.entries` while
    /// a token was fetched.
    let entriesInForce: @Sendable () -> [MetadataEntry]
    private let hostCheck: HostCheck

    /// The universe domain served: Google's public cloud.
    public static let universeDomain = "googleapis.com"

    /// A router for `configuration`'s endpoint serving `tokens`' entries; `now` is the wall clock
    /// in seconds since the Unix epoch (for `expires_in`); `entriesInForce` the entries a token
    /// is checked against again when it comes (`tokens`' own when `nil`: no reload replaces them).
    public init(
        configuration: MetadataServerConfiguration,
        tokens: any MetadataTokenSource,
        now: @escaping @Sendable () -> Double = MetadataRouter.wallClock,
        entriesInForce: (@Sendable () -> [MetadataEntry])? = nil
    ) {
        self.configuration = configuration
        self.tokens = tokens
        self.now = now
        self.entriesInForce = entriesInForce ?? { tokens.entries }
        self.hostCheck = HostCheck(listen: configuration.listen)
    }

    /// Whether some entry's rules allow `peer`: a peer none allows is served no token, and is the
    /// first to make room when the endpoint is full.
    public func allowsAnyEntry(_ peer: MetadataPeer) -> Bool {
        guard case .user(let user) = peer else { return false }
        return tokens.entries.contains { $0.allows(user) }
    }

    /// The wall clock: seconds since the Unix epoch.
    @Sendable public static func wallClock() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The answer to `request` from `peer`.
    public func respond(to request: MetadataRequest, from peer: MetadataPeer) async -> MetadataResponse {
        if let refusal = refusal(of: request) { return refusal }
        guard let target = RequestTarget(request.target) else {
            return .error(
                .badRequest,
                "400 Bad Request: the request target \(ResponseText.echo(request.target)) is not a path"
            )
        }
        if let authority = target.authority, !hostCheck.accepts(authority) {
            return .error(
                .refusedHost,
                "403 Forbidden: the target's host \(ResponseText.echo(authority)) is not this endpoint"
            )
        }
        if target.isTrue("wait_for_change") {
            return .error(.badRequest, "400 Bad Request: wait_for_change is not supported here")
        }
        return await route(target, peer: peer)
    }

    /// The 403 or 405 that `request`'s fields or method earn, if any.
    private func refusal(of request: MetadataRequest) -> MetadataResponse? {
        let hosts = request.values(of: "Host")
        guard hosts.count == 1, let host = hosts.first, hostCheck.accepts(host) else {
            let named = hosts.first.map { "Host \(ResponseText.echo($0))" } ?? "a missing Host"
            return .error(
                .refusedHost,
                "403 Forbidden: \(hosts.count > 1 ? "several Host fields" : named) is not this endpoint "
                    + "(\(configuration.listen), localhost or metadata.google.internal)"
            )
        }
        if !request.values(of: "X-Forwarded-For").isEmpty || !request.values(of: "Forwarded").isEmpty {
            return .error(
                .refusedForwarded,
                "403 Forbidden: requests through a proxy (X-Forwarded-For, Forwarded) are refused"
            )
        }
        guard request.values(of: "Metadata-Flavor") == ["Google"] else {
            return .error(.refusedFlavor, "403 Forbidden: missing Metadata-Flavor: Google header")
        }
        guard request.method == "GET" || request.method == "HEAD" else {
            return .error(
                .badMethod,
                "405 Method Not Allowed: \(ResponseText.echo(request.method)); only GET and HEAD",
                extraHeaders: [("Allow", "GET, HEAD")]
            )
        }
        return nil
    }

    /// The answer for a checked request's path.
    private func route(_ target: RequestTarget, peer: MetadataPeer) async -> MetadataResponse {
        var path = target.segments[...]
        // `/a/b` and `/a/b/` name the same directory; a leaf is answered only without the slash.
        let directory = path.last == "" && path.count > 1
        if directory { path.removeLast() }
        switch Array(path) {
        case [""]: return .text("computeMetadata/\n")
        case ["computeMetadata"]: return .text("v1/\n")
        case ["computeMetadata", "v1"]: return .text("instance/\nproject/\nuniverse/\n")
        case ["computeMetadata", "v1", "instance"]: return .text("service-accounts/\n")
        case ["computeMetadata", "v1", "project"]: return .text("project-id\n")
        case ["computeMetadata", "v1", "project", "project-id"] where !directory:
            guard let project = projectID() else { return notFound(target, why: "no project id is configured") }
            return .text(project)
        case ["computeMetadata", "v1", "universe"]: return .text("universe-domain\n")
        case ["computeMetadata", "v1", "universe", "universe-domain"] where !directory:
            return .text(Self.universeDomain)
        case ["computeMetadata", "v1", "instance", "service-accounts"]:
            return accountsDirectory(peer: peer, recursive: target.isTrue("recursive"))
        default:
            guard path.count >= 5, path.count <= 6,
                Array(path.prefix(4)) == ["computeMetadata", "v1", "instance", "service-accounts"]
            else { return notFound(target) }
            let account = path[path.startIndex + 4]
            let leaf = path.count == 6 ? path[path.startIndex + 5] : nil
            if leaf != nil && directory { return notFound(target) }
            return await serviceAccount(account, leaf: leaf, target: target, peer: peer)
        }
    }

    /// 404, naming the path (decoded, then escaped and cut short: ``ResponseText/echo(_:)``).
    func notFound(_ target: RequestTarget, why: String? = nil) -> MetadataResponse {
        let path = "/" + target.segments.joined(separator: "/")
        return .error(.notFound, "404 Not Found: \(ResponseText.echo(path))" + (why.map { ": \($0)" } ?? ""))
    }

    /// The project id: configured, else the project of the default entry's account.
    private func projectID() -> String? {
        if let projectID = configuration.projectID { return projectID }
        guard let entry = tokens.entries.first(where: { $0.name == configuration.defaultEntry }) else { return nil }
        return Self.project(ofAccount: entry.account)
    }

    /// `PROJECT` of `name@PROJECT.iam.gserviceaccount.com`; `nil` for other accounts (App
    /// Engine's and Compute Engine's default accounts do not name their project that way).
    static func project(ofAccount account: String) -> String? {
        let suffix = ".iam.gserviceaccount.com"
        guard let at = account.lastIndex(of: "@") else { return nil }
        let domain = account[account.index(after: at)...].lowercased()
        guard domain.hasSuffix(suffix) else { return nil }
        let project = domain.dropLast(suffix.count)
        return project.isEmpty || project.contains(".") ? nil : String(project)
    }
}

extension MetadataRouter {
    /// The entry `name` stands for, for `peer`; or the refusal.
    ///
    /// `default` is the configured default entry. An email is matched without regard to case
    /// against every entry's account; when several entries share it, the default entry comes
    /// first, then the others by name, and the first one whose rules allow the peer is chosen (so
    /// `default/`'s email leads back to the default entry, and a peer allowed only another entry
    /// of the same account gets that one). Matching entries none of which allow the peer: 403.
    func entry(named name: String, for peer: MetadataPeer, target: RequestTarget) -> Result<MetadataEntry, Refusal> {
        let user: MetadataPeer.User
        switch peer {
        case .user(let identified): user = identified
        case .unidentified(let reason): return .failure(Refusal(Self.unidentified(reason)))
        }
        let entries = tokens.entries
        let candidates: [MetadataEntry]
        if name == "default" {
            candidates = entries.filter { $0.name == configuration.defaultEntry }
            if candidates.isEmpty { return .failure(Refusal(notFound(target, why: "no default entry is configured"))) }
        } else {
            let wanted = name.lowercased()
            candidates = servingOrder(entries.filter { $0.account.lowercased() == wanted })
            if candidates.isEmpty { return .failure(Refusal(notFound(target, why: "no such service account here"))) }
        }
        guard let allowed = candidates.first(where: { $0.allows(user) }) else {
            let names = candidates.map(\.name).joined(separator: ", ")
            return .failure(
                Refusal(.error(.refusedRules, "403 Forbidden: uid \(user.uid) is not allowed the token of \(names)"))
            )
        }
        return .success(allowed)
    }

    /// The 403 for a peer the kernel did not identify.
    static func unidentified(_ reason: String) -> MetadataResponse {
        .error(.refusedPeer, "403 Forbidden: the connecting process could not be identified: \(reason)")
    }

    /// `entries` with the default entry first, then the others by name.
    func servingOrder(_ entries: [MetadataEntry]) -> [MetadataEntry] {
        let defaultName = configuration.defaultEntry
        return entries.sorted { first, second in
            let firstIsDefault = first.name == defaultName
            let secondIsDefault = second.name == defaultName
            if firstIsDefault != secondIsDefault { return firstIsDefault }
            return first.name < second.name
        }
    }

    /// A refusal, as an error so that `Result` can carry it.
    struct Refusal: Error {
        let response: MetadataResponse
        init(_ response: MetadataResponse) { self.response = response }
    }

    /// `instance/service-accounts/`: `default/` and each account the peer may have, one a line;
    /// with `recursive=true`, a JSON object of each one's recursive answer.
    func accountsDirectory(peer: MetadataPeer, recursive: Bool) -> MetadataResponse {
        let user: MetadataPeer.User
        switch peer {
        case .user(let identified): user = identified
        case .unidentified(let reason): return Self.unidentified(reason)
        }
        let entries = tokens.entries.filter { $0.allows(user) }
        var names: [(String, MetadataEntry)] = []
        if let defaultEntry = entries.first(where: { $0.name == configuration.defaultEntry }) {
            names.append(("default", defaultEntry))
        }
        var seen: Set<String> = []
        for entry in servingOrder(entries) where seen.insert(entry.account.lowercased()).inserted {
            names.append((entry.account, entry))
        }
        if recursive {
            let members = names.map { ResponseText.json($0.0) + ":" + accountJSON($0.1) }
            return .json("{" + members.joined(separator: ",") + "}")
        }
        return .text(names.map { $0.0 + "/\n" }.joined())
    }

    /// One account's recursive answer: `{"aliases":[...],"email":...,"scopes":[...]}`.
    func accountJSON(_ entry: MetadataEntry) -> String {
        let aliases = entry.name == configuration.defaultEntry ? ["default"] : []
        return "{\"aliases\":\(ResponseText.json(aliases)),\"email\":\(ResponseText.json(entry.account)),"
            + "\"scopes\":\(ResponseText.json(entry.scopes))}"
    }

    /// `instance/service-accounts/<name>/` and what is under it.
    func serviceAccount(_ name: String, leaf: String?, target: RequestTarget, peer: MetadataPeer) async
        -> MetadataResponse
    {
        let entry: MetadataEntry
        switch self.entry(named: name, for: peer, target: target) {
        case .success(let found): entry = found
        case .failure(let refusal): return refusal.response
        }
        switch leaf {
        case nil:
            if target.isTrue("recursive") { return .json(accountJSON(entry)) }
            return .text("aliases\nemail\nidentity\nscopes\ntoken\n")
        case "aliases": return .text(entry.name == configuration.defaultEntry ? "default\n" : "")
        case "email": return .text(entry.account)
        case "scopes": return .text(entry.scopes.map { $0 + "\n" }.joined())
        case "token": return await token(of: entry, target: target, peer: peer)
        default: return notFound(target, why: leaf == "identity" ? "identity tokens are not served here" : nil)
        }
    }

    /// `.../token`: the entry's access token, if the scopes asked for (`scopes=a,b`) are among
    /// the entry's; the token is the entry's own, carrying all of its scopes. It is sent only if
    /// the entry in force when it comes (a reload may have come while it was fetched) still
    /// allows `peer`.
    func token(of entry: MetadataEntry, target: RequestTarget, peer: MetadataPeer) async -> MetadataResponse {
        var asked: [String] = []
        for value in target.values(of: "scopes") {
            for scope in value.split(whereSeparator: { $0 == "," || $0 == " " }) where !asked.contains(String(scope)) {
                asked.append(String(scope))
            }
        }
        let outside = asked.filter { !entry.scopes.contains($0) }
        if !outside.isEmpty {
            return .error(
                .refusedScopes,
                "403 Forbidden: entry \(entry.name) does not have the scopes "
                    + outside.map { ResponseText.echo($0) }.joined(separator: ", ")
            )
        }
        let token: MetadataToken
        do {
            token = try await tokens.token(for: entry)
        } catch {
            var response = MetadataResponse.error(
                .unavailable,
                "503 Service Unavailable: no token for \(entry.name) now; try again"
            )
            response.failure = String(describing: error)
            return response
        }
        guard case .user(let user) = peer,
            entriesInForce().contains(where: { $0.name == entry.name && $0.allows(user) })
        else {
            let uid = if case .user(let user) = peer { "uid \(user.uid)" } else { "the peer" }
            return .error(
                .refusedRules,
                "403 Forbidden: \(uid) is no longer allowed the token of \(entry.name): the rules changed"
            )
        }
        let expiresIn = Self.wholeSeconds(token.expiresAt - now())
        return .json(
            "{\"access_token\":\(ResponseText.json(token.accessToken)),\"expires_in\":\(expiresIn),"
                + "\"token_type\":\"Bearer\"}",
            outcome: .token,
            extraHeaders: [("Cache-Control", "no-store")]
        )
    }
}

extension MetadataRouter {
    /// `seconds` as whole seconds (rounded down), 0 for a negative or not finite count, at most
    /// a billion.
    static func wholeSeconds(_ seconds: Double) -> Int {
        guard seconds.isFinite, seconds > 0 else { return 0 }
        return Int(Swift.min(seconds, 1e9).rounded(.down))
    }
}
