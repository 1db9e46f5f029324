import TokenAgent

/// The text of an `INFO` reply (after `OK `): space-separated `name=value` fields about one cached
/// key, never its token. Times are Unix seconds; `-` stands for "none". `last_error` is the last
/// field and runs to the end of the line (the failure's text may contain spaces).
///
/// ```
/// OK cached=no
/// OK cached=yes token=yes fingerprint=3f9a1c07b2e4 fetched_at=1767225600 expires_at=1767229200 next_refresh=1767228540 reads=14 last_read_at=1767225912 failures=0 last_error_at=- last_error_reason=- last_error=-
/// ```
enum KeyInfoLine {
    /// The reply text for `info` (`nil`: nothing cached for the key).
    static func text(_ info: KeyInfo?) -> String {
        guard let info else { return "cached=no" }
        func time(_ value: UnixTime?) -> String { value.map { "\($0.wholeSeconds)" } ?? "-" }
        return [
            "cached=yes",
            "token=\(info.fingerprint == nil ? "no" : "yes")",
            "fingerprint=\(info.fingerprint ?? "-")",
            "fetched_at=\(time(info.fetchedAt))",
            "expires_at=\(time(info.expiresAt))",
            "next_refresh=\(time(info.nextRefresh))",
            "reads=\(info.readsSinceFetch)",
            "last_read_at=\(time(info.lastReadAt))",
            "failures=\(info.failures)",
            "last_error_at=\(time(info.lastErrorAt))",
            "last_error_reason=\(info.lastErrorReason?.rawValue ?? "-")",
            "last_error=\(info.lastError ?? "-")",
        ].joined(separator: " ")
    }
}
