/// Reads the two date formats providers send, by hand: no `DateFormatter` (which, fed hostile
/// header values by the fuzzer, leaked memory inside Foundation on every call, and is slow) and
/// no locale or time-zone database.
public enum Timestamps {
    /// An HTTP date in the IMF-fixdate form RFC 9110 requires senders to use,
    /// `Sun, 06 Nov 1994 08:49:37 GMT` (the day name is not checked; `UTC` is taken for `GMT`),
    /// as Unix seconds. `nil` for anything else.
    public static func httpDate(_ text: some StringProtocol) -> Double? {
        var reader = Reader(Array(text.utf8))
        reader.skipSpaces()
        guard reader.letters(3), reader.literal(", "), let day = reader.digits(2), reader.literal(" "),
            let month = reader.month(), reader.literal(" "), let year = reader.digits(4), reader.literal(" "),
            let time = reader.time(), reader.literal(" "),
            reader.literal("GMT") || reader.literal("UTC")
        else { return nil }
        reader.skipSpaces()
        guard reader.atEnd else { return nil }
        return unixSeconds(year: year, month: month, day: day, hour: time.0, minute: time.1, second: time.2)
    }

    /// An RFC 3339 date-time, `2027-01-15T08:00:00Z`, with optional fractional seconds and a `Z`
    /// or `±HH:MM` offset (`t` and `z` in lower case too), as Unix seconds. `nil` for anything else.
    public static func rfc3339(_ text: some StringProtocol) -> Double? {
        var reader = Reader(Array(text.utf8))
        guard let year = reader.digits(4), reader.literal("-"), let month = reader.digits(2), reader.literal("-"),
            let day = reader.digits(2), reader.literal("T") || reader.literal("t"),
            let time = reader.time()
        else { return nil }
        var fraction = 0.0
        if reader.literal(".") {
            var scale = 0.1
            var any = false
            while let digit = reader.digits(1) {
                fraction += Double(digit) * scale
                scale /= 10
                any = true
            }
            guard any else { return nil }
        }
        var offset = 0
        if reader.literal("Z") || reader.literal("z") {
            offset = 0
        } else {
            let sign: Int
            if reader.literal("+") {
                sign = 1
            } else if reader.literal("-") {
                sign = -1
            } else {
                return nil
            }
            guard let hours = reader.digits(2), hours <= 23, reader.literal(":"), let minutes = reader.digits(2),
                minutes <= 59
            else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        }
        guard reader.atEnd, (1...12).contains(month),
            let base = unixSeconds(year: year, month: month, day: day, hour: time.0, minute: time.1, second: time.2)
        else { return nil }
        return base - Double(offset) + fraction
    }

    /// Seconds since the epoch of a proleptic Gregorian date and time in UTC; `nil` when the day
    /// does not exist (30 February) or a field is out of range (a leap second, 60, is allowed).
    static func unixSeconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Double? {
        let monthLengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...12).contains(month), hour <= 23, minute <= 59, second <= 60 else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let length = month == 2 && leap ? 29 : monthLengths[month - 1]
        guard (1...length).contains(day) else { return nil }
        // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Double(days) * 86_400 + Double(hour * 3600 + minute * 60 + second)
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }

        mutating func skipSpaces() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            let matches = text.withUTF8Buffer { expected in
                expected.indices.allSatisfy { bytes[index + $0] == expected[$0] }
            }
            if matches { index += count }
            return matches
        }

        mutating func letters(_ count: Int) -> Bool {
            guard bytes.count - index >= count,
                bytes[index..<index + count].allSatisfy({ ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A })
            else { return false }
            index += count
            return true
        }

        /// Exactly `count` ASCII digits as a number.
        mutating func digits(_ count: Int) -> Int? {
            guard bytes.count - index >= count else { return nil }
            var value = 0
            for byte in bytes[index..<index + count] {
                guard byte >= 0x30, byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            index += count
            return value
        }

        mutating func time() -> (Int, Int, Int)? {
            guard let hour = digits(2), literal(":"), let minute = digits(2), literal(":"), let second = digits(2)
            else { return nil }
            return (hour, minute, second)
        }

        mutating func month() -> Int? {
            let names: [StaticString] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ]
            for (number, name) in names.enumerated() where literal(name) { return number + 1 }
            return nil
        }
    }
}
