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
