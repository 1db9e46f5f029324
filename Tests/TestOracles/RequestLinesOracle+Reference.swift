// The reference parser of RequestLinesOracle: request lines parsed as docs/PROTOCOL.md says,
// simply, for the oracle to compare RequestParser with. Shared, like RequestLinesOracle.swift, by
// the libFuzzer target (scripts/fuzz) and the tests that replay the corpus.
#if !TOKENWIRE_FUZZ_BUILD
    import TokenWire
#endif

extension RequestLinesOracle {
    // MARK: Reference parser

    /// Parses a line as docs/PROTOCOL.md says, simply: one trailing CR dropped, at most 4096
    /// bytes of UTF-8, fields split at U+0020, verbs ASCII case-insensitive, then the kind, id,
    /// min-validity and refused-token rules. Errors are told by code only.
    static func referenceParse(_ line: [UInt8]) -> Outcome {
        var bytes = line[...]
        if bytes.last == cr { bytes = bytes.dropLast() }
        guard bytes.count <= limit, String(validating: bytes, as: UTF8.self) != nil else {
            return .error(.badRequest)
        }
        // Cutting valid UTF-8 at an ASCII byte leaves valid UTF-8.
        let fields = bytes.split(separator: space).map { String(decoding: $0, as: UTF8.self) }
        guard let verbField = fields.first else { return .error(.badRequest) }
        let verb = verbField.utf8.map { (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 }
        let arguments = Array(fields.dropFirst())
        // The kind's error, if it breaks the kind rules.
        func kindError() -> Outcome? {
            let kind = arguments[0].utf8
            let kindIsWellFormed =
                (1...WireLimits.maxKindBytes).contains(kind.count)
                && kind.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
            return kindIsWellFormed ? nil : .error(.badKind)
        }
        // The kind's or the id's error, if either breaks its rules (the kind is checked first).
        func keyError() -> Outcome? {
            if let error = kindError() { return error }
            if arguments[0] == "access" { return isAccessName(arguments[1]) ? nil : .error(.badKind) }
            if !isValidID(arguments[1], kind: arguments[0]) { return .error(.badID) }
            return nil
        }
        // The kind a request means: `access <name>` is the access-token entry's own kind.
        func kind() -> String { arguments[0] == "access" ? "access:" + arguments[1] : arguments[0] }
        let layout = { (field: String) -> Bool in
            (1...4).contains(field.utf8.count) && field.utf8.allSatisfy { (0x30...0x39).contains($0) }
                && Int(field)! > 0
        }
        switch verb {
        case Array("GET".utf8):
            guard arguments.count == 2 || arguments.count == 3 else { return .error(.badRequest) }
            if let error = keyError() { return error }
            guard arguments.count == 3 else {
                return .request(.get(kind: kind(), id: arguments[1], minValiditySeconds: nil))
            }
            let digits = arguments[2].utf8
            guard digits.count <= 6, digits.allSatisfy({ (0x30...0x39).contains($0) }) else {
                return .error(.badRequest)
            }
            let seconds = digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            guard seconds <= WireLimits.maxMinValiditySeconds else { return .error(.badRequest) }
            return .request(.get(kind: kind(), id: arguments[1], minValiditySeconds: seconds))
        case Array("REFRESH".utf8):
            guard arguments.count == 2 || arguments.count == 3 else { return .error(.badRequest) }
            if let error = keyError() { return error }
            guard arguments.count == 3 else { return .request(.refresh(kind: kind(), id: arguments[1])) }
            // The refused token: printable ASCII without spaces.
            guard arguments[2].utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else { return .error(.badRequest) }
            return .request(.refresh(kind: kind(), id: arguments[1], refusedToken: arguments[2]))
        case Array("DROP".utf8):
            guard arguments.count == 2 else { return .error(.badRequest) }
            if let error = keyError() { return error }
            return .request(.drop(kind: kind(), id: arguments[1]))
        case Array("SHM".utf8):
            // `SHM <kind> [<layout> ...]`, or `SHM access <name> [<layout> ...]`: up to 8 layouts.
            let access = arguments.first == "access"
            let named = access ? 2 : 1
            guard arguments.count >= named, arguments.count <= named + 8, arguments[named...].allSatisfy(layout) else {
                return .error(.badRequest)
            }
            let layouts = arguments[named...].map { Int($0)! }
            if access {
                return isAccessName(arguments[1]) ? .request(.shm(kind: kind(), layouts: layouts)) : .error(.badKind)
            }
            return kindError() ?? .request(.shm(kind: arguments[0], layouts: layouts))
        case Array("TOUCH".utf8):
            guard arguments.count >= 2 else { return .error(.badRequest) }
            // The kind's rule first, then each id in turn.
            if arguments[0] == "access" {
                guard arguments.count == 2 else { return .error(.badRequest) }
                return keyError() ?? .request(.touch(kind: kind(), ids: [arguments[1]]))
            }
            if let error = kindError() { return error }
            for id in arguments[1...] where !isValidID(id, kind: arguments[0]) { return .error(.badID) }
            return .request(.touch(kind: arguments[0], ids: Array(arguments[1...])))
        case Array("WARM".utf8):
            // The count of ids first (at most 64), then the kind, then each id in turn.
            guard arguments.count >= 2, arguments.count - 1 <= WireLimits.maxWarmIDs else {
                return .error(.badRequest)
            }
            if arguments[0] == "access" {
                guard arguments.count == 2 else { return .error(.badRequest) }
                return keyError() ?? .request(.warm(kind: kind(), ids: [arguments[1]]))
            }
            if let error = kindError() { return error }
            for id in arguments[1...] where !isValidID(id) { return .error(.badID) }
            return .request(.warm(kind: arguments[0], ids: Array(arguments[1...])))
        case Array("INFO".utf8):
            guard arguments.count == 2 else { return .error(.badRequest) }
            if let error = keyError() { return error }
            return .request(.info(kind: kind(), id: arguments[1]))
        case Array("PING".utf8): return arguments.isEmpty ? .request(.ping) : .error(.badRequest)
        case Array("STATS".utf8): return arguments.isEmpty ? .request(.stats) : .error(.badRequest)
        case Array("METRICS".utf8): return arguments.isEmpty ? .request(.metrics) : .error(.badRequest)
        case Array("HELP".utf8): return arguments.isEmpty ? .request(.help) : .error(.badRequest)
        case Array("QUIT".utf8): return arguments.isEmpty ? .request(.quit) : .error(.badRequest)
        default: return .error(.badRequest)
        }
    }

    /// An access-token entry's name: 1 to 25 of `a-z`, `0-9` and `-`.
    private static func isAccessName(_ name: String) -> Bool {
        (1...25).contains(name.utf8.count)
            && name.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }

    /// The protocol's rule for `id` under `kind`: the four kinds that act for the whole fleet take
    /// `*` and nothing else; every other kind takes Fleet Engine's ids.
    private static func isValidID(_ id: String, kind: String) -> Bool {
        let wholeFleet = ["server", "delivery-server", "fleet-reader", "delivery-fleet-reader"]
        if wholeFleet.contains(where: { $0.utf8.elementsEqual(kind.utf8) }) { return id.utf8.elementsEqual("*".utf8) }
        return isValidID(id)
    }

    /// Fleet Engine's id rules, as the protocol's table states them, and not one of the ids with
    /// a meaning of their own (`*`, `.`, `..`).
    private static func isValidID(_ id: String) -> Bool {
        if ["*", ".", ".."].contains(where: { $0.utf8.elementsEqual(id.utf8) }) { return false }
        // Nor one that NFKC turns into one of them (the compatibility forms of `.` and `*`).
        let compatibility: [UInt32: String] = [
            0x2E: ".", 0x2024: ".", 0xFE52: ".", 0xFF0E: ".", 0x2025: "..", 0x2A: "*", 0xFE61: "*", 0xFF0A: "*",
        ]
        let folded = id.unicodeScalars.map { compatibility[$0.value] ?? "?" }.joined()
        if ["*", ".", ".."].contains(folded) { return false }
        let forbidden: Set<Unicode.Scalar> = ["/", ":", "\\", "?", "#"]
        let refusedCategories: Set<Unicode.GeneralCategory> = [
            .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator, .paragraphSeparator,
        ]
        let scalars = id.unicodeScalars
        return !scalars.isEmpty && scalars.count <= WireLimits.maxIDScalars
            && scalars.allSatisfy {
                !$0.properties.isWhitespace && !refusedCategories.contains($0.properties.generalCategory)
                    && !forbidden.contains($0)
            }
    }
}
