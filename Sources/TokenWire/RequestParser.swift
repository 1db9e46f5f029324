/// Parses request lines of protocol v1.
///
/// The parser is pure: it checks syntax, verbs, field counts, kind syntax and id rules. Whether a
/// kind is configured is the agent's business.
public enum RequestParser {
    /// Parses one request line, given without its LF. A trailing CR is dropped.
    public static func parse(_ line: some Collection<UInt8>) -> Result<WireRequest, WireError> {
        var bytes = Array(line)
        if bytes.last == 0x0D { bytes.removeLast() }
        if bytes.count > WireLimits.maxRequestLineBytes {
            return .failure(WireError(.badRequest, "line too long"))
        }
        guard String(validating: bytes, as: UTF8.self) != nil else {
            return .failure(WireError(.badRequest, "line is not UTF-8"))
        }
        return parseFields(bytes)
    }

    /// Parses one request line that is already a string (no LF; a trailing CR is dropped).
    public static func parse(text: String) -> Result<WireRequest, WireError> {
        var bytes = Array(text.utf8)
        if bytes.last == 0x0D { bytes.removeLast() }
        return parseFields(bytes)
    }

    /// Parses a line of valid UTF-8 whose CR, if any, is already gone. Fields are separated by
    /// U+0020 bytes alone (not by what Unicode treats as a cluster boundary), and verbs match
    /// case-insensitively in ASCII only.
    private static func parseFields(_ bytes: [UInt8]) -> Result<WireRequest, WireError> {
        let fields = bytes.split(separator: 0x20, omittingEmptySubsequences: true).map {
            Substring(decoding: $0, as: UTF8.self)
        }
        guard let verbField = fields.first else {
            return .failure(WireError(.badRequest, "empty request"))
        }
        let name = String(decoding: verbField.utf8.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, as: UTF8.self)
        guard let verb = WireRequest.Verb(rawValue: name) else {
            return .failure(WireError(.badRequest, "unknown verb \(quotedVerb(verbField.utf8)); try HELP"))
        }
        let arguments = fields.dropFirst()
        switch verb {
        case .get:
            guard arguments.count == 2 || arguments.count == 3 else {
                return .failure(usage("GET <kind> <id> [<min-validity-s>]", tooMany: arguments.count > 3))
            }
            let key: (kind: String, id: String)
            switch self.key(kind: arguments[arguments.startIndex], id: arguments[arguments.startIndex + 1]) {
            case .success(let checked): key = checked
            case .failure(let problem): return .failure(problem)
            }
            var minValidity: Int?
            if arguments.count == 3 {
                let field = arguments[arguments.startIndex + 2]
                guard field.utf8.count <= 6, field.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                    let value = Int(field), value <= WireLimits.maxMinValiditySeconds
                else {
                    // A third field that is no attempt at a number is most likely the rest of an
                    // id with a space in it: say so, rather than speak of min-validity alone.
                    if !looksNumeric(field.utf8) {
                        return .failure(
                            WireError(
                                .badRequest,
                                "id contains whitespace, or min-validity is not whole seconds from 0 to \(WireLimits.maxMinValiditySeconds)"
                            )
                        )
                    }
                    return .failure(
                        WireError(
                            .badRequest,
                            "min-validity must be whole seconds from 0 to \(WireLimits.maxMinValiditySeconds)"
                        )
                    )
                }
                minValidity = value
            }
            return .success(.get(kind: key.kind, id: key.id, minValiditySeconds: minValidity))
        case .refresh:
            guard arguments.count == 2 || arguments.count == 3 else {
                return .failure(usage("REFRESH <kind> <id> [<refused-token>]", tooMany: arguments.count > 3))
            }
            let key: (kind: String, id: String)
            switch self.key(kind: arguments[arguments.startIndex], id: arguments[arguments.startIndex + 1]) {
            case .success(let checked): key = checked
            case .failure(let problem): return .failure(problem)
            }
            var refused: String?
            if arguments.count == 3 {
                let token = arguments[arguments.startIndex + 2]
                guard token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                    return .failure(WireError(.badRequest, "refused token must be printable ASCII"))
                }
                refused = String(token)
            }
            return .success(.refresh(kind: key.kind, id: key.id, refusedToken: refused))
        case .drop:
            guard arguments.count == 2 else {
                return .failure(usage("DROP <kind> <id>", tooMany: arguments.count > 2))
            }
            return self.key(kind: arguments[arguments.startIndex], id: arguments[arguments.startIndex + 1]).map {
                .drop(kind: $0.kind, id: $0.id)
            }
        case .shm:
            // `SHM access <name> [<layout> ...]`: an access-token entry's segment.
            if arguments.first == Substring(AccessTokenKind.wireKind) { return accessSegment(arguments.dropFirst()) }
            // The layouts a reader can map: a few small numbers.
            let layouts = arguments.dropFirst().compactMap(layout)
            guard arguments.count >= 1, arguments.count <= 9, layouts.count == arguments.count - 1 else {
                return .failure(WireError(.badRequest, "usage: SHM <kind> [<layout> ...]"))
            }
            let kind = arguments[arguments.startIndex]
            guard TokenIdentifier.isWellFormedKind(kind) else {
                return .failure(WireError(.badKind, "kind must be 1 to 32 of a-z, 0-9 and -"))
            }
            return .success(.shm(kind: String(kind), layouts: layouts))
        case .touch:
            guard arguments.count >= 2 else {
                return .failure(WireError(.badRequest, "usage: TOUCH <kind> <id> [<id> ...]"))
            }
            let kind = arguments[arguments.startIndex]
            if kind == Substring(AccessTokenKind.wireKind) {
                guard arguments.count == 2 else {
                    return .failure(WireError(.badRequest, "usage: TOUCH access <name>"))
                }
                return key(kind: kind, id: arguments[arguments.startIndex + 1]).map {
                    .touch(kind: $0.kind, ids: [$0.id])
                }
            }
            var ids: [String] = []
            for id in arguments.dropFirst() {
                if let problem = keyProblem(kind: kind, id: id) { return .failure(problem) }
                ids.append(String(id))
            }
            return .success(.touch(kind: String(kind), ids: ids))
        case .warm:
            guard arguments.count >= 2 else {
                return .failure(WireError(.badRequest, "usage: WARM <kind> <id> [<id> ...]"))
            }
            guard arguments.count - 1 <= WireLimits.maxWarmIDs else {
                return .failure(WireError(.badRequest, "too many ids; at most \(WireLimits.maxWarmIDs)"))
            }
            let kind = arguments[arguments.startIndex]
            if kind == Substring(AccessTokenKind.wireKind) {
                guard arguments.count == 2 else { return .failure(WireError(.badRequest, "usage: WARM access <name>")) }
                return key(kind: kind, id: arguments[arguments.startIndex + 1]).map {
                    .warm(kind: $0.kind, ids: [$0.id])
                }
            }
            var ids: [String] = []
            for id in arguments.dropFirst() {
                if let problem = keyProblem(kind: kind, id: id) { return .failure(problem) }
                ids.append(String(id))
            }
            return .success(.warm(kind: String(kind), ids: ids))
        case .info:
            guard arguments.count == 2 else {
                return .failure(usage("INFO <kind> <id>", tooMany: arguments.count > 2))
            }
            return self.key(kind: arguments[arguments.startIndex], id: arguments[arguments.startIndex + 1]).map {
                .info(kind: $0.kind, id: $0.id)
            }
        case .ping, .stats, .metrics, .help, .quit:
            guard arguments.isEmpty else {
                return .failure(WireError(.badRequest, "\(verb.rawValue) takes no arguments"))
            }
            switch verb {
            case .ping: return .success(.ping)
            case .stats: return .success(.stats)
            case .metrics: return .success(.metrics)
            case .help: return .success(.help)
            default: return .success(.quit)
            }
        }
    }

    /// The usage of a verb that takes a kind and one id, for a line with too few or too many
    /// fields: too many most often means an id with a space in it, so that is said too.
    private static func usage(_ syntax: String, tooMany: Bool) -> WireError {
        WireError(
            .badRequest,
            tooMany ? "usage: \(syntax) (too many fields: an id cannot contain whitespace)" : "usage: \(syntax)"
        )
    }

    /// The key `kind` `id` names: for `access <name>`, the entry's kind (``AccessTokenKind``) with
    /// the name as its id; for any other kind, the kind and id themselves once they follow the
    /// kind and id rules.
    private static func key(kind: Substring, id: Substring) -> Result<(kind: String, id: String), WireError> {
        if kind == Substring(AccessTokenKind.wireKind) {
            guard AccessTokenKind.isWellFormedName(id) else {
                return .failure(WireError(.badKind, AccessTokenKind.nameRule))
            }
            return .success((AccessTokenKind.kind(name: id), String(id)))
        }
        if let problem = keyProblem(kind: kind, id: id) { return .failure(problem) }
        return .success((String(kind), String(id)))
    }

    /// `SHM access <name> [<layout> ...]`, given the fields after `access`.
    private static func accessSegment(_ fields: ArraySlice<Substring>) -> Result<WireRequest, WireError> {
        let usage = WireError(.badRequest, "usage: SHM access <name> [<layout> ...]")
        guard let name = fields.first, fields.count <= 9 else { return .failure(usage) }
        let layouts = fields.dropFirst().compactMap(layout)
        guard layouts.count == fields.count - 1 else { return .failure(usage) }
        guard AccessTokenKind.isWellFormedName(name) else {
            return .failure(WireError(.badKind, AccessTokenKind.nameRule))
        }
        return .success(.shm(kind: AccessTokenKind.kind(name: name), layouts: layouts))
    }

    /// A layout version an `SHM` request names: 1 to 4 digits, not 0.
    private static func layout(_ field: Substring) -> Int? {
        guard (1...4).contains(field.utf8.count), field.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
            let layout = Int(field), layout > 0
        else { return nil }
        return layout
    }

    private static func keyProblem(kind: Substring, id: Substring) -> WireError? {
        guard TokenIdentifier.isWellFormedKind(kind) else {
            return WireError(.badKind, "kind must be 1 to 32 of a-z, 0-9 and -")
        }
        if let problem = TokenIdentifier.problem(kind: kind, id: id) { return WireError(.badID, problem) }
        return nil
    }

    /// The longest part of an unknown verb an error quotes, in bytes.
    static let maxQuotedVerbBytes = 32

    /// An unknown verb as an error quotes it: its first ``maxQuotedVerbBytes`` bytes (then `...`),
    /// printable ASCII as it is except the backslash, every other byte as `\xNN`, so the reply
    /// stays one line of printable ASCII whatever was sent.
    static func quotedVerb(_ verb: some Collection<UInt8>) -> String {
        var quoted = ""
        for byte in verb.prefix(maxQuotedVerbBytes) {
            if byte > 0x20, byte < 0x7F, byte != UInt8(ascii: "\\") {
                quoted.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16)
                quoted += "\\x" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return verb.count > maxQuotedVerbBytes ? quoted + "..." : quoted
    }

    /// Whether a GET's third field starts like a number (a digit, a sign or a point): then it was
    /// meant as min-validity.
    private static func looksNumeric(_ field: some Collection<UInt8>) -> Bool {
        guard let first = field.first else { return false }
        return (0x30...0x39).contains(first) || first == UInt8(ascii: "-") || first == UInt8(ascii: "+")
            || first == UInt8(ascii: ".")
    }
}
