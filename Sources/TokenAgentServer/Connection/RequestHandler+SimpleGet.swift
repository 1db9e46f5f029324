// The cached GET's fast path: recognised and answered from the line's bytes, no parse.
import NIOCore
import TokenAgent
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

extension RequestHandler {
    /// The fast path: a plain `GET` of a configured kind, recognised and looked up straight from
    /// the line's bytes; a cache hit allocates nothing. Returns `false` for any other line.
    func handleSimpleGet(_ line: ByteBuffer) -> Bool {
        line.withUnsafeReadableBytes { bytes -> Bool in
            guard let get = SimpleGet.recognise(bytes),
                let kind = configuredKind(UnsafeRawBufferPointer(rebasing: bytes[get.kind]))
            else {
                return false
            }
            // Read before the check: a reload after it makes the reply be checked again.
            let rulesVersion = context.access.version
            if !allowedKinds.allows(kind, version: rulesVersion) {
                if let denied = context.access.check(peer, kind: kind) {
                    append(.reply(.error(denied), verb: .get))
                    return true
                }
                allowedKinds.remember(kind, version: rulesVersion)
            }
            let id = UnsafeRawBufferPointer(rebasing: bytes[get.id])
            // First in line, a cached token is written straight into the output from where the
            // agent keeps it (shared memory, mostly): its one copy. Behind another reply, it is
            // copied into its pending reply.
            let first = pendingReplies.isEmpty
            var queued: ServedToken?
            let inPlace = context.engine.lookup(
                kind: kind,
                idBytes: id,
                minValidity: get.minValidity,
                requester: peer?.uid
            ) {
                token in
                if first {
                    prepareOutput()
                    Self.encodeToken(token.bytes, expiresAt: token.expiresAt, into: &output)
                } else {
                    queued = token.served
                }
            }
            if case .answer(let lookup) = inPlace {
                answer(
                    lookup,
                    verb: .get,
                    kind: kind,
                    rulesVersion: rulesVersion,
                    key: { (kind, String(decoding: id, as: UTF8.self), get.minValidity) }
                )
            } else if let queued {
                append(
                    .token(
                        TokenAnswer(
                            reply: .token(queued),
                            verb: .get,
                            key: (kind, String(decoding: id, as: UTF8.self), get.minValidity),
                            kind: kind,
                            rulesVersion: rulesVersion
                        )
                    )
                )
            } else {
                context.requests.count(.get, .ok)
            }
            return true
        }
    }

    /// The configured kind named by `bytes`, as the engine's own string; `nil` when none is.
    private func configuredKind(_ bytes: UnsafeRawBufferPointer) -> String? {
        let version = context.engine.kindsVersion
        if version != kindNamesVersion {
            kindNames = context.engine.kinds.map { ($0, Array($0.utf8)) }
            kindNamesVersion = version
        }
        for kind in kindNames where kind.bytes.count == bytes.count {
            if kind.bytes.withUnsafeBytes({ memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0 }) {
                return kind.name
            }
        }
        return nil
    }
}

/// The kinds a connection's peer was allowed under one version of the access rules: a GET of one
/// of them under the same version skips the rules (a lock and two dictionary lookups). Denials
/// are never remembered: each is counted, and logged once per peer and kind, by the rules.
struct AllowedKinds {
    private var version = -1
    private var kinds: [String] = []

    /// Whether `kind` was allowed under rules `version`.
    func allows(_ kind: String, version: Int) -> Bool {
        version == self.version && kinds.first(named: kind, by: { $0 }) != nil
    }

    /// `kind` was allowed under rules `version`; what was allowed under another is forgotten.
    mutating func remember(_ kind: String, version: Int) {
        if version != self.version {
            self.version = version
            kinds.removeAll(keepingCapacity: true)
        }
        kinds.append(kind)
    }
}
