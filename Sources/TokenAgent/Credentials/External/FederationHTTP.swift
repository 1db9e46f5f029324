import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// The HTTP calls of a federation exchange (subject-token sources, STS, impersonation): each
/// bounded by the source's time-out and ``maxBodyBytes``, no redirects followed, and errors that
/// name what was asked, never a secret.
struct FederationHTTP: Sendable {
    let client: HTTPClient
    /// The time-out of one call, seconds.
    let timeout: Double

    /// The largest reply body read, bytes.
    static let maxBodyBytes = 64 * 1024

    /// Sends a request and reads its reply whole; transport failures are transient, naming `what`.
    func send(
        _ method: HTTPMethod,
        _ url: String,
        headers: [(String, String)],
        body: [UInt8]? = nil,
        what: String
    ) async throws(CredentialsError) -> OutboundReply {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        do {
            return try await client.exchange(
                request,
                timeout: .milliseconds(Int64(timeout * 1000)),
                maxBodyBytes: Self.maxBodyBytes
            )
        } catch {
            throw CredentialsError(.transient, "\(what): \(error.text)")
        }
    }

    /// Sends a request and gives its 2xx body; any other status is a transient failure naming
    /// `what` and the status.
    func call(
        _ method: HTTPMethod,
        _ url: String,
        headers: [(String, String)],
        what: String
    ) async throws(CredentialsError) -> [UInt8] {
        let reply = try await send(method, url, headers: headers, what: what)
        guard (200..<300).contains(reply.status) else {
            throw CredentialsError(
                .transient,
                "\(what): HTTP \(reply.status)\(AccessTokenExchange.errorField(reply.body))"
            )
        }
        return reply.body
    }
}
