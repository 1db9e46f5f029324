import TokenWire

extension StrictJSON {
    /// A member name given twice in one object: where (the dotted path of the names and array
    /// indices leading to it, the name last, as in `providers.vehicle.url` or
    /// `error.details.0.reason`). Names are compared as ``firstRepeatedName(in:)`` compares them.
    public struct RepeatedKey: Error, Sendable, Hashable, CustomStringConvertible {
        /// The names and indices leading to the repeated name, and the name itself last.
        public var path: [String]

        /// The path dotted, as written (for the operator's own files, as other config keys are named).
        public var dotted: String { path.joined(separator: ".") }

        /// The path dotted, each name cut to printable ASCII (at most 40 bytes, anything else `?`)
        /// and the whole to 200 bytes: for a body from outside, whose names may hold anything.
        public var printable: String { String(path.map(JWTClaims.printable).joined(separator: ".").prefix(200)) }

        public var description: String { "\(printable) appears twice" }
    }

    /// An object's members, no name twice, with a lookup by name.
    public struct Object: Sendable {
        /// The members, in the order written.
        public let members: [Member]
        private let index: [String: Int]

        /// `members`, or the first name given twice among them.
        init(members: [Member]) throws(RepeatedKey) {
            var index: [String: Int] = [:]
            index.reserveCapacity(members.count)
            for (position, member) in members.enumerated() {
                guard index.updateValue(position, forKey: member.name) == nil else {
                    throw RepeatedKey(path: [member.name])
                }
            }
            self.members = members
            self.index = index
        }

        /// The value of member `name`, if there is one.
        public subscript(name: String) -> StrictJSON? { index[name].map { members[$0].value } }

        /// The member names, in the order written.
        public var names: [String] { members.map(\.name) }
    }

    /// Reads `bytes` as one JSON object in which no object, at any depth, gives a name twice: the
    /// one strict path for JSON from outside the agent (providers, Google's error bodies) and for
    /// the operator's files. `nil` when the bytes are not a JSON object; ``RepeatedKey`` naming
    /// the first name given twice (in the order written, outer objects first) when one is.
    public static func object(bytes: some Collection<UInt8>) throws(RepeatedKey) -> Object? {
        guard let value = StrictJSON(bytes: bytes), case .object(let members) = value else { return nil }
        if let path = value.firstRepeatedKey() { throw RepeatedKey(path: path) }
        return try Object(members: members)
    }

    /// ``object(bytes:)`` for a reply that must be one JSON object, each refusal as the caller's
    /// error: `repeated` for a name given twice, `notAnObject` for anything but a JSON object.
    public static func object<Failure: Error>(
        bytes: some Collection<UInt8>,
        repeated: (RepeatedKey) -> Failure,
        notAnObject: () -> Failure
    ) throws(Failure) -> Object {
        let object: Object?
        do {
            object = try Self.object(bytes: bytes)
        } catch {
            throw repeated(error)
        }
        guard let object else { throw notAnObject() }
        return object
    }

    /// This object's members by name; `nil` for any other value. Throws ``RepeatedKey`` when a
    /// name is given twice in this object (objects inside it are not looked at).
    public func object() throws(RepeatedKey) -> Object? {
        guard case .object(let members) = self else { return nil }
        return try Object(members: members)
    }

    /// The path of the first name given twice in any object of this value (in the order written,
    /// an object's own names before those inside its members), or `nil` when there is none.
    public func firstRepeatedKey() -> [String]? {
        switch self {
        case .object(let members):
            if let name = Self.firstRepeatedName(in: members) { return [name] }
            for member in members {
                if let inner = member.value.firstRepeatedKey() { return [member.name] + inner }
            }
            return nil
        case .array(let elements):
            for (index, element) in elements.enumerated() {
                if let inner = element.firstRepeatedKey() { return [String(index)] + inner }
            }
            return nil
        case .string, .number, .bool, .null:
            return nil
        }
    }
}
