import Crypto
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// AWS Signature Version 4 for the one request federation signs: STS `GetCallerIdentity`, which
/// Google's STS replays to AWS to learn who the caller is. Made as google-auth's `aws.py` makes
/// it, so Google's STS reads both the same way: `host` and `x-amz-date` (and
/// `x-amz-security-token` for temporary keys) are signed, and the headers Google reads
/// (`x-goog-cloud-target-resource`) are added after signing; the canonical URI is the path or
/// `/`; the query is sorted and URI-encoded; the payload is empty.
enum AWSRequestSigner {
    /// AWS keys: never logged, never in a message.
    struct Keys: Sendable, CustomStringConvertible {
        var accessKeyID: String
        var secretAccessKey: String
        var sessionToken: String?

        /// The key id only (AWS treats it as an identifier, not a secret).
        var description: String { "AWS key \(accessKeyID)" }
    }

    /// A signed request's headers, in the order google-auth lists them (sorted by name, as
    /// written: `Authorization` first), and the whole subject token.
    struct Signed: Sendable {
        var url: String
        var headers: [(key: String, value: String)]

        /// The subject token: `{"headers": [{"key", "value"}, …], "method": "POST", "url"}`
        /// (keys sorted, no spaces), percent-encoded as Python's `urllib.parse.quote` does.
        var subjectToken: String {
            // JSON as Python's `json.dumps` writes it by default (ASCII only).
            func quoted(_ text: String) -> String { JSONString.quoted(text, asciiOnly: true) }
            var json = "{\"headers\":["
            json += headers.map { "{\"key\":\(quoted($0.key)),\"value\":\(quoted($0.value))}" }
                .joined(separator: ",")
            json += "],\"method\":\"POST\",\"url\":\(quoted(url))}"
            return PercentEncoding.encode(json, alsoKeeping: "/")
        }
    }

    /// Signs a `POST` of `url` (its host, path and query) with `keys` for `region`, at `date`
    /// (Unix seconds), then adds `unsignedHeaders`.
    static func sign(
        url: FederationURL,
        region: String,
        keys: Keys,
        date: Int64,
        unsignedHeaders: [(String, String)]
    ) -> Signed {
        let host = url.host(region: region).lowercased()
        let service = String(host.split(separator: ".").first ?? "sts")
        let (amzDate, dateStamp) = timestamps(date)
        var signed: [String: String] = [:]
        if let token = keys.sessionToken { signed["x-amz-security-token"] = token }
        signed["host"] = host
        signed["x-amz-date"] = amzDate
        let names = signed.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(signed[$0]!)\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let canonicalRequest = [
            "POST", canonicalURI(url.path), canonicalQuery(url.query ?? ""), canonicalHeaders, signedHeaders,
            CacheSnapshot.hex(SHA256.hash(data: [UInt8]())),
        ].joined(separator: "\n")
        let scope = "\(dateStamp)/\(region)/\(service)/aws4_request"
        let stringToSign = [
            "AWS4-HMAC-SHA256", amzDate, scope, CacheSnapshot.hex(SHA256.hash(data: Array(canonicalRequest.utf8))),
        ].joined(separator: "\n")
        let signature = CacheSnapshot.hex(
            HMAC<SHA256>.authenticationCode(
                for: Array(stringToSign.utf8),
                using: signingKey(secret: keys.secretAccessKey, dateStamp: dateStamp, region: region, service: service)
            )
        )
        let authorization =
            "AWS4-HMAC-SHA256 Credential=\(keys.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        var headers: [String: String] = ["Authorization": authorization, "host": host, "x-amz-date": amzDate]
        if let token = keys.sessionToken { headers["x-amz-security-token"] = token }
        for (name, value) in unsignedHeaders { headers[name] = value }
        return Signed(
            url: url.url(region: region),
            headers: headers.keys.sorted().map { (key: $0, value: headers[$0]!) }
        )
    }

    /// The key that signs: HMAC-SHA256 of `AWS4<secret>` over the date, region, service and
    /// `aws4_request`, in turn.
    static func signingKey(secret: String, dateStamp: String, region: String, service: String) -> SymmetricKey {
        var key = SymmetricKey(data: Array("AWS4\(secret)".utf8))
        for part in [dateStamp, region, service, "aws4_request"] {
            key = SymmetricKey(data: Array(HMAC<SHA256>.authenticationCode(for: Array(part.utf8), using: key)))
        }
        return key
    }

    /// `20150830T123600Z` and `20150830` for Unix time `seconds`.
    static func timestamps(_ seconds: Int64) -> (amzDate: String, dateStamp: String) {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let rest = seconds - days * 86400
        // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let dateStamp = "\(year)\(two(month))\(two(day))"
        return (dateStamp + "T" + two(rest / 3600) + two(rest / 60 % 60) + two(rest % 60) + "Z", dateStamp)
    }

    /// The path, `/` when empty, as written (it is checked to hold unreserved characters and
    /// escapes only).
    static func canonicalURI(_ path: String) -> String { path.isEmpty ? "/" : path }

    /// The query's pairs, each name and value decoded then encoded as AWS says, sorted by name
    /// then value, joined by `&`.
    static func canonicalQuery(_ query: String) -> String {
        guard !query.isEmpty else { return "" }
        var pairs: [(String, String)] = []
        for piece in query.split(separator: "&") where !piece.isEmpty {
            let parts = piece.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = formDecode(String(parts[0]))
            let value = parts.count > 1 ? formDecode(String(parts[1])) : ""
            pairs.append((PercentEncoding.encode(name), PercentEncoding.encode(value)))
        }
        return pairs.sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }.map { "\($0.0)=\($0.1)" }
            .joined(separator: "&")
    }

    /// `text` with `+` as space and `%XX` escapes decoded (a malformed escape kept as written).
    static func formDecode(_ text: String) -> String {
        var bytes: [UInt8] = []
        let source = Array(text.utf8)
        var index = 0
        while index < source.count {
            let byte = source[index]
            if byte == UInt8(ascii: "+") {
                bytes.append(0x20)
            } else if byte == UInt8(ascii: "%"), index + 2 < source.count,
                ServiceEndpoint.isHex(source[index + 1]), ServiceEndpoint.isHex(source[index + 2]),
                let value = UInt8(String(decoding: source[(index + 1)...(index + 2)], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                index += 2
            } else {
                bytes.append(byte)
            }
            index += 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
