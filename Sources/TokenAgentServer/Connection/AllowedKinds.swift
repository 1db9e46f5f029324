import TokenAgent

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
