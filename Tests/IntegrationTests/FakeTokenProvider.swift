import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import TestSupport

/// A real HTTP token provider on 127.0.0.1 for the tests. It serves `GET /token/<kind>/<id>`, and
/// the id's prefix picks the behaviour, so one provider covers every case:
///
/// | id prefix  | reply |
/// |---|---|
/// | (none)     | `{"token": <JWT for this id>, "expires_in": lifetime}` |
/// | `seed-`    | the seed samples' shape: `{"VEHICLE_TOKEN_KEY": <JWT>, "TOKEN_EXPIRATION": 3600}` |
/// | `plain-`   | `text/plain` JWT |
/// | `opaque-`  | `text/plain` opaque token, `Cache-Control: max-age=600` |
/// | `garbage-` | `200` with an HTML body |
/// | `wrongid-` | a JWT whose authorization claim names another id |
/// | `expired-` | a JWT that expired a minute ago |
/// | `huge-`    | a 100 KiB body |
/// | `status<N>-` | HTTP status N |
/// | `hang-`    | never answers |
/// | `drip-`    | a `200` head at once, then its body (a good token) one byte every 500 ms |
/// | `pad-`     | a JWT of random length whose signature part is `<id>_<n x's>_<n>` |
/// | `slow-`    | answers after 400 ms |
/// | `delay<N>-` | answers an hour-long token after N ms |
/// | `retry<N>-` | `429` with `Retry-After: N` |
/// | `retrydate-` | `503` with `Retry-After` an HTTP date 30 s ahead |
/// | `redirect-` | `302` to ``redirectTarget`` |
/// | `truncated-` | `200` whose body ends before its `Content-Length`, then the connection closes |
/// | `nonjson-` | `200` `application/json` that is not JSON |
/// | `twice-` | `200` JSON giving `token` twice: a JWT for another id, then one for this id |
/// | `futureiat-` | a JWT issued 300 s in the future |
///
/// ``script(_:status:headers:body:)`` gives one id an exact reply (status, headers, body), for
/// replies no prefix describes. ``paths`` lists every request target as it arrived.
///
/// ``setDateSkew(seconds:)`` adds a `Date` header that far from the real time to every reply.
/// ``failAll`` turns every reply into a 503 (the provider is "down").
final class FakeTokenProvider: Sendable {
    /// An exact reply for one id.
    struct Scripted: Sendable {
        var status: HTTPResponseStatus
        var headers: [(String, String)]
        var body: [UInt8]
    }

    private struct State {
        var scripts: [String: Scripted] = [:]
        var paths: [String] = []
        var requests: [String: Int] = [:]
        var headers: [String: [String]] = [:]
        var issued: [String] = []
        var failAll = false
        var lifetime = 3600
        var delayMilliseconds = 0
        var dateSkew: Int?
        var redirectTarget = "http://127.0.0.2:1/token/vehicle/elsewhere"
    }

    private let state = Mutex(State())
    private let held = HeldWork()
    private let channel: any Channel
    /// The port it listens on.
    let port: Int

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress!.port!
    }

    static func start(host: String = "127.0.0.1") async throws -> FakeTokenProvider {
        let box = Mutex<FakeTokenProvider?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(
                        ProviderHandler(provider: { box.withLock { $0! } })
                    )
                }
            }
            .bind(host: host, port: 0).get()
        let provider = FakeTokenProvider(channel: channel)
        box.withLock { $0 = provider }
        return provider
    }

    /// The URL template for `kind`.
    func url(kind: String) -> String { "http://127.0.0.1:\(port)/token/\(kind)/{id}" }

    /// Requests seen for `id` (any kind).
    func requests(for id: String) -> Int { state.withLock { $0.requests[id, default: 0] } }
    /// All requests seen.
    var totalRequests: Int { state.withLock { $0.requests.values.reduce(0, +) } }
    /// Every token handed out.
    var issuedTokens: [String] { state.withLock { $0.issued } }
    /// Values of a request header seen, in order.
    func headerValues(_ name: String) -> [String] { state.withLock { $0.headers[name.lowercased()] ?? [] } }

    /// Every request target seen, raw (before any decoding), in order.
    var paths: [String] { state.withLock { $0.paths } }

    /// Answers requests for `id` (any kind) with exactly this status, these headers (plus
    /// `Content-Length`) and this body.
    func script(_ id: String, status: HTTPResponseStatus = .ok, headers: [(String, String)], body: [UInt8]) {
        state.withLock { $0.scripts[id] = Scripted(status: status, headers: headers, body: body) }
    }

    /// The scripted reply to `GET path`, if its id has one; counts the request either way.
    fileprivate func scripted(path: String) -> Scripted? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        let id = parts.count == 3 ? parts[2].removingPercentEncoding ?? parts[2] : ""
        return state.withLock { state in
            state.paths.append(path)
            guard let scripted = state.scripts[id] else { return nil }
            state.requests[id, default: 0] += 1
            return scripted
        }
    }

    /// Makes every reply a 503 (or back to normal).
    func setDown(_ down: Bool) { state.withLock { $0.failAll = down } }
    /// The lifetime of the tokens it issues, seconds.
    func setLifetime(_ seconds: Int) { state.withLock { $0.lifetime = seconds } }
    /// A `Date` header `seconds` away from the real time on every reply (`nil`: no header).
    func setDateSkew(seconds: Int?) { state.withLock { $0.dateSkew = seconds } }
    /// Where `redirect-` ids are sent.
    func setRedirectTarget(_ url: String) { state.withLock { $0.redirectTarget = url } }
    /// The extra headers of every reply.
    fileprivate var replyHeaders: [(String, String)] {
        guard let skew = state.withLock({ $0.dateSkew }) else { return [] }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return [("Date", formatter.string(from: Date().addingTimeInterval(TimeInterval(skew))))]
    }

    /// An HTTP date `seconds` from now.
    static func httpDate(secondsFromNow seconds: Double) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date().addingTimeInterval(seconds))
    }

    /// A delay before every reply.
    func setDelay(milliseconds: Int) { state.withLock { $0.delayMilliseconds = milliseconds } }

    /// From now on every reply is held, however long, until ``releaseHeld()``: a fetch in flight
    /// for as long as a test needs, with no window a loaded machine can miss.
    func holdReplies() { held.hold() }

    /// Sends every reply held, and holds no more.
    func releaseHeld() { held.release() }

    /// Holds `send` when replies are held; `false` when it should go now.
    fileprivate func hold(_ send: @escaping @Sendable () -> Void) -> Bool { held.hold(send) }

    func stop() async {
        try? await channel.close()
    }

    /// Decides the reply to `GET path` with `headers`: status, content type, body, delay; `nil` to hang.
    fileprivate func reply(path: String, headers: HTTPHeaders) -> (HTTPResponseStatus, String, [UInt8], Int)? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard parts.count == 3, parts[0] == "token" else { return (.notFound, "text/plain", Array("no".utf8), 0) }
        let kind = parts[1]
        let id = parts[2].removingPercentEncoding ?? parts[2]
        let (failAll, lifetime, delay) = state.withLock { state in
            state.requests[id, default: 0] += 1
            for (name, value) in headers { state.headers[name.lowercased(), default: []].append(value) }
            return (state.failAll, state.lifetime, state.delayMilliseconds)
        }
        if failAll { return (.serviceUnavailable, "text/plain", Array("down".utf8), delay) }
        let now = Int(Date().timeIntervalSince1970)
        let claim = kind == "trip" ? "tripid" : "vehicleid"
        func jwt(id: String, exp: Int) -> String {
            let serial = state.withLock { $0.issued.count }
            let token = Self.jwt(["exp": exp, "iat": now, "authorization": [claim: id], "n": serial])
            state.withLock { $0.issued.append(token) }
            return token
        }
        func json(_ object: [String: Any]) -> [UInt8] { Array(try! JSONSerialization.data(withJSONObject: object)) }
        if id.hasPrefix("pad-") {
            // A token of random length whose signature part names the id and carries a checkable
            // padding: `<id>_<n x's>_<n>` (what the shared-memory stress readers verify).
            let count = Int.random(in: 0...1500)
            let token = jwt(id: id, exp: now + lifetime)
            let signed =
                token[..<token.lastIndex(of: ".")!] + ".\(id)_" + String(repeating: "x", count: count) + "_\(count)"
            return (.ok, "application/json", json(["token": String(signed), "expires_in": lifetime]), delay)
        }
        if id.hasPrefix("hang-") { return nil }
        if id.hasPrefix("drip-") {
            return (.ok, Self.dripping, json(["token": jwt(id: id, exp: now + lifetime), "expires_in": lifetime]), 0)
        }
        if id.hasPrefix("delay"), let dash = id.firstIndex(of: "-"),
            let milliseconds = Int(id[id.index(id.startIndex, offsetBy: 5)..<dash])
        {
            return (
                .ok, "application/json", json(["token": jwt(id: id, exp: now + 3600), "expires_in": 3600]), milliseconds
            )
        }
        if id.hasPrefix("slow-") {
            return (
                .ok, "application/json", json(["token": jwt(id: id, exp: now + lifetime), "expires_in": lifetime]), 400
            )
        }
        if id.hasPrefix("seed-") {
            let key = kind == "trip" ? "TRIP_TOKEN_KEY" : "VEHICLE_TOKEN_KEY"
            return (
                .ok, "application/json", json([key: jwt(id: id, exp: now + lifetime), "TOKEN_EXPIRATION": 3600]), delay
            )
        }
        if id.hasPrefix("plain-") { return (.ok, "text/plain", Array(jwt(id: id, exp: now + lifetime).utf8), delay) }
        if id.hasPrefix("opaque-") {
            // Not a JWT: the expiry comes from Cache-Control (see the handler).
            return (.ok, Self.plainWithMaxAge600, Array("opaque-token-\(id)".utf8), delay)
        }
        if id.hasPrefix("garbage-") { return (.ok, "text/html", Array("<html>oops</html>".utf8), delay) }
        if id.hasPrefix("wrongid-") {
            return (.ok, "application/json", json(["token": jwt(id: "someone-else", exp: now + lifetime)]), delay)
        }
        if id.hasPrefix("expired-") {
            return (.ok, "application/json", json(["token": jwt(id: id, exp: now - 60)]), delay)
        }
        if id.hasPrefix("huge-") {
            return (.ok, "application/json", Array(repeating: UInt8(ascii: " "), count: 100 * 1024), delay)
        }
        if id.hasPrefix("retrydate-") {
            return (.serviceUnavailable, Self.header("Retry-After", Self.httpDate(secondsFromNow: 30)), [], delay)
        }
        if id.hasPrefix("retry"), let dash = id.firstIndex(of: "-"),
            let seconds = Int(id[id.index(id.startIndex, offsetBy: 5)..<dash])
        {
            return (.tooManyRequests, Self.header("Retry-After", "\(seconds)"), [], delay)
        }
        if id.hasPrefix("redirect-") {
            let target = state.withLock { $0.redirectTarget }
            return (.found, Self.header("Location", target), [], delay)
        }
        if id.hasPrefix("truncated-") { return (.ok, Self.truncated, Array(#"{"token": "eyJhbGciOi"#.utf8), delay) }
        if id.hasPrefix("nonjson-") { return (.ok, "application/json", Array("{not json at all".utf8), delay) }
        if id.hasPrefix("twice-") {
            // A reader that keeps the last `token` (Foundation's) would serve the second.
            let other = jwt(id: "someone-else", exp: now + lifetime)
            let body = #"{"token": "\#(other)", "token": "\#(jwt(id: id, exp: now + lifetime))", "expires_in": 600}"#
            return (.ok, "application/json", Array(body.utf8), delay)
        }
        if id.hasPrefix("futureiat-") {
            let token = Self.jwt(["exp": now + lifetime + 300, "iat": now + 300, "authorization": [claim: id]])
            state.withLock { $0.issued.append(token) }
            return (.ok, "application/json", json(["token": token, "expires_in": lifetime]), delay)
        }
        if id.hasPrefix("status"), let dash = id.firstIndex(of: "-"),
            let code = Int(id[id.index(id.startIndex, offsetBy: 6)..<dash])
        {
            return (HTTPResponseStatus(statusCode: code), "text/plain", Array("status".utf8), delay)
        }
        return (
            .ok, "application/json", json(["token": jwt(id: id, exp: now + lifetime), "expires_in": lifetime]), delay
        )
    }

    /// The content type that makes the handler answer `text/plain` with `Cache-Control: max-age=600`.
    static let plainWithMaxAge600 = "text/plain;max-age=600"
    /// The content type that makes the handler promise more body than it sends, then close.
    static let truncated = "application/json;truncated"
    /// The content type that makes the handler send the head at once and the body one byte every
    /// ``dripInterval``.
    static let dripping = "application/json;drip"
    /// How far apart a dripping reply's bytes are.
    static let dripInterval = TimeAmount.milliseconds(500)

    /// A "content type" that makes the handler send one extra header instead.
    static func header(_ name: String, _ value: String) -> String { "header:\(name):\(value)" }

    /// An unsigned JWT-shaped token with the given claims.
    static func jwt(_ claims: [String: Any]) -> String {
        func b64(_ data: Data) -> String {
            data.base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let header = try! JSONSerialization.data(withJSONObject: ["alg": "RS256", "typ": "JWT"])
        let payload = try! JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])
        return b64(header) + "." + b64(payload) + "." + b64(Data("fake-signature-\(UUID())".utf8))
    }
}

private final class ProviderHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let provider: () -> FakeTokenProvider
    private var head: HTTPRequestHead?

    init(provider: @escaping () -> FakeTokenProvider) { self.provider = provider }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body: break
        case .end:
            guard let head else { return }
            let provider = provider()
            if let scripted = provider.scripted(path: head.uri) {
                var headers = HTTPHeaders([("Content-Length", "\(scripted.body.count)")])
                for (name, value) in scripted.headers { headers.add(name: name, value: value) }
                if !head.isKeepAlive { headers.add(name: "Connection", value: "close") }
                context.write(
                    wrapOutboundOut(
                        .head(HTTPResponseHead(version: .http1_1, status: scripted.status, headers: headers))
                    ),
                    promise: nil
                )
                context.write(
                    wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: scripted.body)))),
                    promise: nil
                )
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
                return
            }
            guard let (status, type, body, delay) = provider.reply(path: head.uri, headers: head.headers) else {
                return
            }
            let extra = provider.replyHeaders
            let respond = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let eventLoop = context.eventLoop
            let send: @Sendable () -> Void = {
                eventLoop.execute {
                    let (handler, context) = respond.value
                    guard context.channel.isActive else { return }
                    handler.respond(
                        context: context,
                        status: status,
                        type: type,
                        body: body,
                        keepAlive: head.isKeepAlive,
                        extra: extra
                    )
                }
            }
            if provider.hold(send) { return }
            eventLoop.scheduleTask(in: .milliseconds(Int64(delay))) { send() }
        }
    }

    private func respond(
        context: ChannelHandlerContext,
        status: HTTPResponseStatus,
        type: String,
        body: [UInt8],
        keepAlive: Bool,
        extra: [(String, String)]
    ) {
        var headers = HTTPHeaders([("Content-Length", "\(body.count)")])
        for (name, value) in extra { headers.add(name: name, value: value) }
        if type == FakeTokenProvider.plainWithMaxAge600 {
            headers.add(name: "Content-Type", value: "text/plain")
            headers.add(name: "Cache-Control", value: "max-age=600")
        } else if type == FakeTokenProvider.truncated {
            headers.replaceOrAdd(name: "Content-Length", value: "\(body.count + 100)")
            headers.add(name: "Content-Type", value: "application/json")
            context.write(
                wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
                promise: nil
            )
            context.writeAndFlush(
                wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))),
                promise: nil
            )
            context.close(promise: nil)
            return
        } else if type == FakeTokenProvider.dripping {
            headers.add(name: "Content-Type", value: "application/json")
            context.writeAndFlush(
                wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
                promise: nil
            )
            Self.drip(body, from: 0, bound: NIOLoopBound((self, context), eventLoop: context.eventLoop))
            return
        } else if type.hasPrefix("header:") {
            let parts = type.split(separator: ":", maxSplits: 2).map(String.init)
            headers.add(name: parts[1], value: parts[2])
            headers.add(name: "Content-Type", value: "text/plain")
        } else {
            headers.add(name: "Content-Type", value: type)
        }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
            promise: nil
        )
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// Sends byte `sent` of `body` after ``FakeTokenProvider/dripInterval``, and the next after it,
    /// until the body is sent or the connection closes.
    private static func drip(
        _ body: [UInt8],
        from sent: Int,
        bound: NIOLoopBound<(ProviderHandler, ChannelHandlerContext)>
    ) {
        let eventLoop = bound.value.1.eventLoop
        eventLoop.scheduleTask(in: FakeTokenProvider.dripInterval) {
            let (handler, context) = bound.value
            guard context.channel.isActive, sent < body.count else { return }
            let byte = context.channel.allocator.buffer(bytes: body[sent..<sent + 1])
            context.writeAndFlush(handler.wrapOutboundOut(.body(.byteBuffer(byte))), promise: nil)
            if sent + 1 < body.count {
                drip(body, from: sent + 1, bound: bound)
            } else {
                context.writeAndFlush(handler.wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
