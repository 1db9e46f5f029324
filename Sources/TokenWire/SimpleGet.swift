/// The common request, `GET <kind> <id> [<min-validity-s>]` in its plain form, recognised straight
/// from the line's bytes with no copy and no `String`: the agent's fast path.
///
/// It accepts a subset of what ``RequestParser`` accepts and means the same by it: the verb in
/// capitals, single spaces, an ASCII id, an optional CR at the end. Any other line, valid or not,
/// gives `nil` and goes to ``RequestParser``, which has the last word.
public struct SimpleGet: Sendable, Hashable {
    /// Where the kind is in the line.
    public var kind: Range<Int>
    /// Where the id is in the line.
    public var id: Range<Int>
    /// The minimum validity asked for, if any.
    public var minValidity: Int?

    /// Recognises `line` (without its LF) if it is a plain GET.
    public static func recognise(_ line: UnsafeRawBufferPointer) -> SimpleGet? {
        var end = line.count
        if end > 0, line[end - 1] == 0x0D { end -= 1 }
        guard end > 4, line[0] == 0x47, line[1] == 0x45, line[2] == 0x54, line[3] == 0x20 else { return nil }
        // The kind: 1 to 32 of a-z, 0-9, -, then a space.
        let kindStart = 4
        var index = ByteRun.end(of: line, from: kindStart, to: end, ByteRun.outsideKind)
        let kind = kindStart..<index
        guard !kind.isEmpty, kind.count <= WireLimits.maxKindBytes, index < end, line[index] == 0x20 else { return nil }
        // A wildcard kind takes only `*`, and `access <name>` names an access-token entry's kind:
        // RequestParser handles both with the rest of their rules.
        if TokenIdentifier.isWildcardKind(UnsafeRawBufferPointer(rebasing: line[kind])) { return nil }
        if kind.count == 6, UnsafeRawBufferPointer(rebasing: line[kind]).elementsEqual(AccessTokenKind.wireKind.utf8) {
            return nil
        }
        index += 1
        // The id: 1 to 64 printable ASCII characters other than / : \ ? #, and not * . or ..
        let idStart = index
        index = ByteRun.end(of: line, from: idStart, to: end, ByteRun.outsideID)
        let id = idStart..<index
        guard !id.isEmpty, id.count <= WireLimits.maxIDScalars, index == end || line[index] == 0x20 else { return nil }
        // `*`, `.` and `..` are refused; RequestParser says why.
        if id.count <= 2, TokenIdentifier.isReserved(UnsafeRawBufferPointer(rebasing: line[id])) { return nil }
        guard index < end else { return SimpleGet(kind: kind, id: id, minValidity: nil) }
        // The minimum validity: 1 to 6 digits, at most a day.
        index += 1
        let digitsStart = index
        var value = 0
        while index < end {
            let byte = line[index]
            guard byte >= 0x30, byte <= 0x39, index - digitsStart < 6 else { return nil }
            value = value * 10 + Int(byte - 0x30)
            index += 1
        }
        guard index > digitsStart, value <= WireLimits.maxMinValiditySeconds else { return nil }
        return SimpleGet(kind: kind, id: id, minValidity: value)
    }

    /// Whether a plain GET's id may hold `byte`: the printable ASCII bytes from `!` to `~` but
    /// those no id may hold (``TokenIdentifier``'s `/ : \ ? #`). The rule a byte at a time, for
    /// tests; ``ByteRun/outsideID(_:)`` tests eight at once.
    public static func isIDByte(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && !TokenIdentifier.forbiddenIDScalars.contains(Unicode.Scalar(byte))
    }
}
