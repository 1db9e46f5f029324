/// An answer: status, header fields and body. The server adds `Content-Length` and `Connection`,
/// and leaves the body out for `HEAD`.
public struct MetadataResponse: Sendable {
    /// The status code (200, 400, 403, 404, 405, 503).
    public var status: Int
    /// The header fields; `Metadata-Flavor: Google` is always among them, CORS fields never.
    public var headers: [(name: String, value: String)]
    /// The body.
    public var body: [UInt8]
    /// What went wrong when the token source failed (for the server's log, never sent).
    public var failure: String?
    /// What the answer was, for the agent's counters; its status is ``status``.
    public var outcome: MetadataOutcome

    /// The body as text.
    public var text: String { String(decoding: body, as: UTF8.self) }

    /// The value of header `name` (any case), if present.
    public func value(of name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// A response as given, of `outcome`'s status: `headers` should carry
    /// `Metadata-Flavor: Google` and a content type.
    public init(outcome: MetadataOutcome, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = outcome.status
        self.outcome = outcome
        self.headers = headers
        self.body = body
    }

    /// A response of `outcome`'s status with `body` of `contentType`, and the fields every
    /// response has.
    init(
        outcome: MetadataOutcome,
        contentType: String,
        body: String,
        extraHeaders: [(name: String, value: String)] = []
    ) {
        self.status = outcome.status
        self.outcome = outcome
        self.headers =
            [
                ("Metadata-Flavor", "Google"),
                ("Content-Type", contentType),
                ("X-Content-Type-Options", "nosniff"),
            ] + extraHeaders
        self.body = Array(body.utf8)
    }

    /// The content type of text answers: what the real metadata server sends.
    static let textType = "application/text"
    /// The content type of JSON answers.
    static let jsonType = "application/json"
    /// The content type of refusals and errors.
    static let errorType = "text/plain; charset=utf-8"

    /// A 200 text answer.
    static func text(_ body: String) -> MetadataResponse {
        MetadataResponse(outcome: .ok, contentType: textType, body: body)
    }

    /// A 200 JSON answer (`outcome` `.token` for a token's).
    static func json(
        _ body: String,
        outcome: MetadataOutcome = .ok,
        extraHeaders: [(name: String, value: String)] = []
    ) -> MetadataResponse {
        MetadataResponse(outcome: outcome, contentType: jsonType, body: body, extraHeaders: extraHeaders)
    }

    /// A refusal or error of `outcome`'s status, with `message` and a newline as its text.
    static func error(
        _ outcome: MetadataOutcome,
        _ message: String,
        extraHeaders: [(name: String, value: String)] = []
    ) -> MetadataResponse {
        MetadataResponse(outcome: outcome, contentType: errorType, body: message + "\n", extraHeaders: extraHeaders)
    }
}
