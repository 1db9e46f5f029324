import Crypto
import Foundation

/// AWS Signature Version 4 (`AWS4-HMAC-SHA256`), written from AWS's description of it ("Create a
/// signed AWS API request": canonical request, string to sign, signing key, signature): the fake
/// STS verifies the signed `GetCallerIdentity` requests of `aws4_request` subject tokens with it,
/// and tests sign their own with it (``subjectToken(credentials:region:audience:date:signTargetResource:)``).
///
/// ``publishedExamples`` are two requests of AWS's SigV4 test suite with the signatures AWS
/// publishes for them; ``checkPublishedExamples()`` computes them again (`fake-google
/// --self-check-sigv4` runs it).
public enum FakeAWSSignature {
    /// The algorithm of the `Authorization` header and the string to sign.
    public static let algorithm = "AWS4-HMAC-SHA256"
    /// The hex SHA-256 of an empty payload, the payload hash of a signed `GetCallerIdentity`.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    /// The `X-Amz-Date` format's length: `yyyyMMdd'T'HHmmss'Z'`.
    static let amzDateLength = 16

    // MARK: The steps

    /// `text` URI-encoded as SigV4 wants it: every UTF-8 byte but the unreserved `A-Z a-z 0-9 - _ . ~`
    /// as `%XY` (upper-case hex); `/` stays as it is when `keepingSlash`.
    public static func uriEncode(_ text: String, keepingSlash: Bool = false) -> String {
        var encoded = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                UInt8(ascii: "~"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepingSlash:
                encoded.append("/")
            default:
                let hex = String(byte, radix: 16, uppercase: true)
                encoded += "%" + (byte < 16 ? "0" : "") + hex
            }
        }
        return encoded
    }

    /// The canonical URI of a URL's path as it appears in the URL (percent-encoded): `/` when
    /// empty; `.` and `..` segments resolved and empty segments dropped (a trailing `/` kept);
    /// each segment URI-encoded once more (SigV4 encodes the paths of services other than S3 twice).
    public static func canonicalURI(_ path: String) -> String {
        var segments: [Substring] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch segment {
            case ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment)
            }
        }
        if segments.isEmpty { return "/" }
        let joined = "/" + segments.map { uriEncode(String($0)) }.joined(separator: "/")
        return path.hasSuffix("/") ? joined + "/" : joined
    }

    /// The canonical query string of a URL's query as it appears in the URL (`b=2&a=1`,
    /// percent-encoded, `+` a space): each name and value decoded, then URI-encoded, sorted by
    /// name and then by value, `name=value` joined with `&` (a name without `=` gets an empty value).
    public static func canonicalQuery(_ query: String) -> String {
        func decode(_ part: Substring) -> String {
            let spaced = part.replacingOccurrences(of: "+", with: " ")
            return spaced.removingPercentEncoding ?? spaced
        }
        let pairs = query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (uriEncode(decode(parts[0])), parts.count > 1 ? uriEncode(decode(parts[1])) : "")
        }
        return pairs.sorted { $0.0 == $1.0 ? $0.1 < $1.1 : $0.0 < $1.0 }.map { "\($0.0)=\($0.1)" }
            .joined(separator: "&")
    }

    /// A header value as the canonical headers hold it: leading and trailing white space trimmed,
    /// each run of spaces inside as one.
    static func canonicalValue(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The canonical headers (`name:value\n` for each of `signedHeaders`, in their order, names
    /// lower-case, the values of a repeated header joined with `,`), or `nil` when one of
    /// `signedHeaders` is not among `headers`.
    public static func canonicalHeaders(
        _ headers: [(name: String, value: String)],
        signedHeaders: [String]
    ) -> String? {
        var values: [String: [String]] = [:]
        for (name, value) in headers { values[name.lowercased(), default: []].append(canonicalValue(value)) }
        var canonical = ""
        for name in signedHeaders {
            guard let found = values[name] else { return nil }
            canonical += "\(name):\(found.joined(separator: ","))\n"
        }
        return canonical
    }

    /// The canonical request: method, canonical URI, canonical query string, canonical headers,
    /// signed headers and payload hash, one a line; `nil` when a signed header is missing.
    /// `signedHeaders` are lower-case and sorted.
    public static func canonicalRequest(
        method: String,
        path: String,
        query: String,
        headers: [(name: String, value: String)],
        signedHeaders: [String],
        payloadHash: String = emptyPayloadHash
    ) -> String? {
        guard let canonicalHeaders = canonicalHeaders(headers, signedHeaders: signedHeaders) else { return nil }
        return [
            method, canonicalURI(path), canonicalQuery(query), canonicalHeaders, signedHeaders.joined(separator: ";"),
            payloadHash,
        ].joined(separator: "\n")
    }

    /// `yyyyMMdd/region/service/aws4_request`.
    public static func credentialScope(date: String, region: String, service: String) -> String {
        "\(date)/\(region)/\(service)/aws4_request"
    }

    /// The string to sign: the algorithm, `amzDate`, the credential scope and the hex SHA-256 of
    /// the canonical request, one a line.
    public static func stringToSign(amzDate: String, credentialScope: String, canonicalRequest: String) -> String {
        [algorithm, amzDate, credentialScope, hex(SHA256.hash(data: Array(canonicalRequest.utf8)))]
            .joined(separator: "\n")
    }

    /// The signing key: HMAC-SHA256 of `aws4_request` under that of `service` under that of
    /// `region` under that of `date` (`yyyyMMdd`) under `AWS4` + the secret access key.
    public static func signingKey(secretAccessKey: String, date: String, region: String, service: String) -> [UInt8] {
        var key = Array("AWS4\(secretAccessKey)".utf8)
        for part in [date, region, service, "aws4_request"] { key = hmac(key: key, Array(part.utf8)) }
        return key
    }

    /// The signature (64 lower-case hex digits) of a request, or `nil` when a signed header is
    /// missing. `signedHeaders` `nil`: every header of `headers`. `amzDate` is the request's
    /// `X-Amz-Date` (`yyyyMMdd'T'HHmmss'Z'`), whose first 8 characters are the scope's date.
    public static func signature(
        secretAccessKey: String,
        amzDate: String,
        region: String,
        service: String,
        method: String,
        path: String,
        query: String,
        headers: [(name: String, value: String)],
        signedHeaders: [String]? = nil,
        payloadHash: String = emptyPayloadHash
    ) -> String? {
        let signed = signedHeaders ?? Array(Set(headers.map { $0.name.lowercased() })).sorted()
        guard
            let canonical = canonicalRequest(
                method: method,
                path: path,
                query: query,
                headers: headers,
                signedHeaders: signed,
                payloadHash: payloadHash
            )
        else { return nil }
        let date = String(amzDate.prefix(8))
        let scope = credentialScope(date: date, region: region, service: service)
        let key = signingKey(secretAccessKey: secretAccessKey, date: date, region: region, service: service)
        return hex(
            hmac(
                key: key,
                Array(stringToSign(amzDate: amzDate, credentialScope: scope, canonicalRequest: canonical).utf8)
            )
        )
    }

    // MARK: Published examples

    /// One request of AWS's SigV4 test suite (`aws-sig-v4-test-suite`) and the signature AWS
    /// publishes for it. All use access key `AKIDEXAMPLE`, secret
    /// `wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY`, `20150830T123600Z`, `us-east-1`, service `service`.
    public struct PublishedExample: Sendable {
        /// The test's name in the suite.
        public var name: String
        /// The request's path, as in its request line.
        public var path: String
        /// The request's query (after `?`), as in its request line.
        public var query: String
        /// The signature AWS publishes.
        public var expected: String
    }

    /// `get-vanilla` (`GET /`) and `get-vanilla-query-order-key-case` (`GET /?Param2=value2&Param1=value1`).
    public static let publishedExamples = [
        PublishedExample(
            name: "get-vanilla",
            path: "/",
            query: "",
            expected: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        ),
        PublishedExample(
            name: "get-vanilla-query-order-key-case",
            path: "/",
            query: "Param2=value2&Param1=value1",
            expected: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
        ),
    ]

    /// Each of ``publishedExamples`` with the signature ``signature(secretAccessKey:amzDate:region:service:method:path:query:headers:signedHeaders:payloadHash:)``
    /// computes for it (`GET`, headers `Host: example.amazonaws.com` and `X-Amz-Date`, both signed).
    public static func checkPublishedExamples() -> [(example: PublishedExample, computed: String)] {
        publishedExamples.map { example in
            let computed = signature(
                secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                amzDate: "20150830T123600Z",
                region: "us-east-1",
                service: "service",
                method: "GET",
                path: example.path,
                query: example.query,
                headers: [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")]
            )
            return (example, computed ?? "")
        }
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// `date` as `X-Amz-Date` wants it: `yyyyMMdd'T'HHmmss'Z'`, UTC.
    public static func amzDate(_ date: Date) -> String {
        let parts = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: date)
        func two(_ value: Int?) -> String { String(format: "%02d", value ?? 0) }
        return String(format: "%04d", parts.year ?? 0) + two(parts.month) + two(parts.day) + "T" + two(parts.hour)
            + two(parts.minute) + two(parts.second) + "Z"
    }

    /// The date of an `X-Amz-Date` (`yyyyMMdd'T'HHmmss'Z'`), or `nil`.
    static func date(amzDate text: String) -> Date? {
        let characters = Array(text)
        guard characters.count == amzDateLength, characters[8] == "T", characters[15] == "Z" else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            let digits = String(characters[range])
            return digits.allSatisfy(\.isASCII) ? Int(digits) : nil
        }
        guard let year = number(0..<4), let month = number(4..<6), let day = number(6..<8), let hour = number(9..<11),
            let minute = number(11..<13), let second = number(13..<15)
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        guard let date = calendar.date(from: components), amzDate(date) == text else { return nil }
        return date
    }

    static func hmac(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
