import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension HTTPClient {
    /// The client every outbound call of the agent uses (token providers, IAM Credentials, the
    /// host's credentials): `connectTimeout` bounds the connection; the read time-out is a second
    /// longer than the request's deadline (`timeout`), so a silent server always ends as "Deadline
    /// exceeded", not as whichever of two equal timers a loaded machine happens to fire first.
    /// Redirects are not followed (a bearer token or an id must not travel elsewhere), and bodies
    /// are not decompressed (their size limits count the bytes received). The pool may open as
    /// many HTTP/1.1 connections to a host as the kind's lane lets fetches run
    /// (`max_concurrent_fetches`, at most 1024); AsyncHTTPClient's default of 8 would make every
    /// fetch past the eighth wait for a connection, whatever `max_concurrent_fetches` says.
    static func outbound(connectTimeout: Double, timeout: Double) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: 1024
        )
        configuration.timeout = .init(
            connect: .milliseconds(Int64(connectTimeout * 1000)),
            read: .milliseconds(Int64(timeout * 1000) + 1000)
        )
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Sends `request` and reads its reply whole (head and body, the body at most `maxBodyBytes`)
    /// within `timeout` of the call: AsyncHTTPClient's deadline ends with the head, so the body
    /// is read under the rest of the same deadline, and a server that sends its head and then
    /// drips its body ends as ``OutboundFailure/bodyTimedOut(seconds:)`` (the request cancelled,
    /// its connection closed), never as a fetch that holds on.
    ///
    /// A `GET` whose connection closed before any answer came is sent once more, on another
    /// connection and under the same deadline (RFC 9112 §9.3.1.1): a server may close an idle
    /// keep-alive connection just as the pool hands it to a request, which AsyncHTTPClient reports
    /// as `remoteConnectionClosed` and does not retry. A loaded test run lost one fetch of 13,000
    /// that way. A server that closes every connection unanswered is asked twice, no more.
    func exchange(
        _ request: HTTPClientRequest,
        timeout: TimeAmount,
        maxBodyBytes: Int
    ) async throws(OutboundFailure) -> OutboundReply {
        let deadline = ContinuousClock.now + .nanoseconds(timeout.nanoseconds)
        let sent = NIODeadline.now()
        let response: HTTPClientResponse
        do {
            response = try await execute(request, deadline: sent + timeout)
        } catch let error as HTTPClientError where error == .remoteConnectionClosed && request.method == .GET {
            guard NIODeadline.now() < sent + timeout else { throw .request(error) }
            do {
                response = try await execute(request, deadline: sent + timeout)
            } catch {
                throw .request(error)
            }
        } catch {
            throw .request(error)
        }
        let read = await untilDeadline(deadline) { () -> Result<ByteBuffer, any Error> in
            do {
                return .success(try await response.body.collect(upTo: maxBodyBytes))
            } catch {
                return .failure(error)
            }
        }
        switch read {
        case nil:
            throw .bodyTimedOut(seconds: Double(timeout.nanoseconds) / 1e9)
        case .failure(let error)? where error is NIOTooManyBytesError:
            throw .bodyTooLarge(maxBodyBytes)
        case .failure(let error)?:
            throw .body(error)
        case .success(let body)?:
            return OutboundReply(
                status: Int(response.status.code),
                headers: response.headers,
                body: Array(buffer: body)
            )
        }
    }

    /// Starts shutting the client down and returns at once, for the `deinit` of its owner: an
    /// owner dropped without its `shutdown()` (a configuration build given up half-way, a test
    /// that ended early) still closes its connections, where AsyncHTTPClient would otherwise leak
    /// them (and, in a debug build, trap). The shutdown holds the client until it is done; a
    /// client already shut down is left as it is.
    func shutDownInBackground() {
        shutdown { _ in }
    }
}

/// A reply read whole by ``AsyncHTTPClient/HTTPClient/exchange(_:timeout:maxBodyBytes:)``.
struct OutboundReply: Sendable {
    /// The HTTP status code.
    var status: Int
    /// The reply's headers.
    var headers: HTTPHeaders
    /// The whole body.
    var body: [UInt8]
}

/// Why ``AsyncHTTPClient/HTTPClient/exchange(_:timeout:maxBodyBytes:)`` has no reply.
enum OutboundFailure: Error {
    /// No head: refused, reset, connect time-out, or the deadline passed before the head came.
    case request(any Error)
    /// The head came but the body did not end within the time-out, seconds.
    case bodyTimedOut(seconds: Double)
    /// The body is over this many bytes.
    case bodyTooLarge(Int)
    /// The body broke off (the connection closed before its end).
    case body(any Error)

    /// What went wrong, in the words the agent's errors use (`request failed: Deadline exceeded`,
    /// `reading the reply timed out after 10 s`, ...); never a secret.
    var text: String {
        switch self {
        case .request(let error): "request failed: \(Self.describe(error))"
        case .bodyTimedOut(let seconds):
            "reading the reply timed out after \(Self.seconds(seconds)) s (the body did not end in time)"
        case .bodyTooLarge(let bytes): "reply body over \(bytes / 1024) KiB"
        case .body(let error): "reading the reply failed: \(Self.describe(error))"
        }
    }

    /// `seconds` as `10` or `2.5`.
    static func seconds(_ seconds: Double) -> String {
        seconds == seconds.rounded() && abs(seconds) < 1e9 ? "\(Int(seconds))" : "\(seconds)"
    }

    /// A short name for an error of the HTTP stack.
    static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError { return error.shortDescription }
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
        if let error = error as? NIOConnectionError { return describe(error) }
        return String(describing: type(of: error))
    }

    /// What stopped a connection: the name that does not resolve, or the first address's refusal
    /// (`Connection refused`), never just the error's type.
    static func describe(_ error: NIOConnectionError) -> String {
        if let failure = error.connectionErrors.first {
            return describe(failure.error)
        }
        if let dns = error.dnsAError ?? error.dnsAAAAError {
            let reason =
                (dns as? SocketAddressError.UnknownHost)?.errorDescription ?? String(describing: type(of: dns))
            return "\(Self.cannotResolve) \(hostName(error.host)): \(reason)"
        }
        return "no address to connect to for \(hostName(error.host))"
    }

    /// A host name fit for a message: printable ASCII, at most 253 bytes (DNS's longest name).
    private static func hostName(_ host: String) -> String {
        String(decoding: host.utf8.prefix(253).map { $0 > 0x20 && $0 < 0x7F ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }

    /// How a failure text begins when a host name does not resolve: `FetchFailureReason.dns`.
    static let cannotResolve = "cannot resolve host"
}
