import TokenWire

/// Decodes a `Decodable` value from JSON already read by ``StrictJSON``, so a file is parsed once,
/// strictly, and then decoded: the config file's reader (``ConfigurationFile``).
///
/// It throws the `DecodingError`s `JSONDecoder` throws, with the same coding paths (an array
/// element's key has its index as `intValue`), so errors name the same keys. A number is a
/// `Double` and must be finite; an integer must be exactly representable in its type. The caller
/// refuses names given twice first (``StrictJSON/firstRepeatedKey()``): here the first of two
/// would silently win.
enum StrictJSONDecoder {
    /// `T` decoded from `value`.
    static func decode<T: Decodable>(_ type: T.Type, from value: StrictJSON) throws -> T {
        try T(from: ValueDecoder(value: value, codingPath: []))
    }
}

/// The key of an array element: its index.
private struct IndexKey: CodingKey {
    var intValue: Int?
    var stringValue: String

    init(_ index: Int) {
        intValue = index
        stringValue = "Index \(index)"
    }

    init?(intValue: Int) { self.init(intValue) }
    init?(stringValue: String) { nil }
}

private struct ValueDecoder: Decoder {
    let value: StrictJSON
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            throw Scalar.mismatch([String: Any].self, value, codingPath)
        }
        return KeyedDecodingContainer(KeyedContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw Scalar.mismatch([Any].self, value, codingPath) }
        return UnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        Scalar(value: value, codingPath: codingPath)
    }
}

/// One value at a coding path: the single-value container, and how the other containers read
/// their members and elements.
private struct Scalar: SingleValueDecodingContainer {
    let value: StrictJSON
    let codingPath: [any CodingKey]

    static func mismatch(_ type: Any.Type, _ value: StrictJSON, _ codingPath: [any CodingKey]) -> DecodingError {
        if value == .null {
            return .valueNotFound(
                type,
                .init(codingPath: codingPath, debugDescription: "Expected \(type) value but found null instead.")
            )
        }
        let found =
            switch value {
            case .object: "a dictionary"
            case .array: "an array"
            case .string: "a string"
            case .number: "a number"
            case .bool: "a boolean"
            case .null: "null"
            }
        return .typeMismatch(
            type,
            .init(codingPath: codingPath, debugDescription: "Expected to decode \(type) but found \(found) instead.")
        )
    }

    func decodeNil() -> Bool { value == .null }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let bool) = value else { throw Self.mismatch(type, value, codingPath) }
        return bool
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let string) = value else { throw Self.mismatch(type, value, codingPath) }
        return string
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard case .number(let number) = value else { throw Self.mismatch(type, value, codingPath) }
        guard number.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "is not a finite number"))
        }
        return number
    }

    func decode(_ type: Float.Type) throws -> Float {
        let number = Float(try decode(Double.self))
        guard number.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "is not a finite number"))
        }
        return number
    }

    private func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let number = try decode(Double.self)
        guard let integer = T(exactly: number) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: codingPath,
                    debugDescription: "Parsed JSON number <\(number)> does not fit in \(T.self)."
                )
            )
        }
        return integer
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try T(from: ValueDecoder(value: value, codingPath: codingPath))
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    /// The members; when a name is given twice, the first is read (the caller refuses that first).
    let members: [StrictJSON.Member]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.compactMap { Key(stringValue: $0.name) } }

    func contains(_ key: Key) -> Bool { members.contains { $0.name == key.stringValue } }

    /// The member `key` names, at its path.
    private func scalar(_ key: Key) throws -> Scalar {
        guard let member = members.first(where: { $0.name == key.stringValue }) else {
            throw DecodingError.keyNotFound(
                key,
                .init(codingPath: codingPath, debugDescription: "No value associated with key \(key.stringValue).")
            )
        }
        return Scalar(value: member.value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try scalar(key).decodeNil() }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try scalar(key).decode(type) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try scalar(key).decode(type) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try scalar(key).decode(type) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try scalar(key).decode(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try scalar(key).decode(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try scalar(key).decode(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try scalar(key).decode(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try scalar(key).decode(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try scalar(key).decode(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try scalar(key).decode(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try scalar(key).decode(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try scalar(key).decode(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try scalar(key).decode(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try scalar(key).decode(type) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try scalar(key).decode(type) }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type,
        forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try decoder(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try decoder(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: .object(members), codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder { try decoder(key) }

    private func decoder(_ key: Key) throws -> ValueDecoder {
        let scalar = try scalar(key)
        return ValueDecoder(value: scalar.value, codingPath: scalar.codingPath)
    }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [StrictJSON]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(elements: [StrictJSON], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    /// The next element, at its path; the index moves past it.
    private mutating func next(_ type: Any.Type) throws -> Scalar {
        let path = codingPath + [IndexKey(currentIndex)]
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type,
                .init(codingPath: path, debugDescription: "Unkeyed container is at end.")
            )
        }
        defer { currentIndex += 1 }
        return Scalar(value: elements[currentIndex], codingPath: path)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type).decode(type) }
    mutating func decode(_ type: String.Type) throws -> String { try next(type).decode(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(type).decode(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try next(type).decode(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(type).decode(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type).decode(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type).decode(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type).decode(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type).decode(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type).decode(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type).decode(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type).decode(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type).decode(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type).decode(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type).decode(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let scalar = try next([String: Any].self)
        return try ValueDecoder(value: scalar.value, codingPath: scalar.codingPath).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let scalar = try next([Any].self)
        return try ValueDecoder(value: scalar.value, codingPath: scalar.codingPath).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let scalar = try next(Any.self)
        return ValueDecoder(value: scalar.value, codingPath: scalar.codingPath)
    }
}
