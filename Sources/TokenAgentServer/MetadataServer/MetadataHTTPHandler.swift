import Logging
import LoopbackPeer
import MetadataEndpoint
import NIOCore
import NIOHTTP1
import NIOPosix

/// Answers a connection's requests one at a time and in order (NIO's pipelining handler holds a
/// pipelined request until the answer before it is written), keep-alive as the client asks, up to
/// `maxRequests` a connection; then `Connection: close`.
///
/// The peer is looked up as soon as the connection is accepted, on `threadPool` (a netlink query
/// and the user database, which may block), and kept for the connection's requests: the socket's
/// owner cannot change. What it finds ranks the connection at the gate (a peer no entry allows is
/// the first to make room). Each request's head must come within `headTimeout` of the connection
/// or of the answer before it, and the whole request within the request deadline of its first
/// byte (``RequestByteLimit``); only a whole request counts as being answered.
final class MetadataHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// Where a connection is between requests.
    private enum State {
        /// Waiting for a request's head.
        case waitingForHead
        /// The head came; its body (ignored, and bounded) is coming.
        case readingBody(HTTPRequestHead)
        /// The request is being answered.
        case answering
        /// The last answer is being written: nothing more is read.
        case closing
    }

    struct Settings {
        var router: RouterHolder
        var resolver: any MetadataPeerResolver
        var threadPool: NIOThreadPool
        var headTimeout: TimeAmount
        var maxRequests: Int
        var logger: Logger
        /// Counts each answer's outcome, and the head time-outs.
        var statistics: MetadataStatistics
        /// The refusals' log lines, summarised per peer.
        var refusals: RefusalLog
        /// The answers' pace, per peer.
        var pacer: PeerPacer
    }

    private let settings: Settings
    private let byteLimit: RequestByteLimit
    private let setAnswering: (Bool) -> Void
    private let setStanding: (HTTPConnectionGate.Standing) -> Void
    private var state = State.waitingForHead
    private var headDeadline: Scheduled<Void>?
    /// The peer, once looked up (started when the connection is accepted).
    private var peerLookup: EventLoopFuture<MetadataPeer>?
    private var requests = 0
    private var removed = false
    /// The client shut its sending side: the request being answered is the last.
    private var inputClosed = false

    init(
        settings: Settings,
        byteLimit: RequestByteLimit,
        setAnswering: @escaping (Bool) -> Void,
        setStanding: @escaping (HTTPConnectionGate.Standing) -> Void
    ) {
        self.settings = settings
        self.byteLimit = byteLimit
        self.setAnswering = setAnswering
        self.setStanding = setStanding
    }

    func handlerAdded(context: ChannelHandlerContext) {
        armHeadDeadline(context: context)
        lookUpPeer(context: context)
    }

    /// Looks the peer up now, before any request: its standing at the gate comes from it.
    private func lookUpPeer(context: ChannelHandlerContext) {
        let resolver = settings.resolver
        let ends = Self.endpoints(of: context.channel)
        let lookup = settings.threadPool.runIfActive(eventLoop: context.eventLoop) { () -> MetadataPeer in
            guard let ends else { return .unidentified(reason: "the connection's addresses are not IP addresses") }
            return resolver.peer(client: ends.client, server: ends.server)
        }.recover { error in .unidentified(reason: "the lookup did not run: \(error)") }
        peerLookup = lookup
        let router = settings.router
        lookup.assumeIsolated().whenSuccess { peer in
            guard !self.removed, let router = router.router else { return }
            self.setStanding(router.allowsAnyEntry(peer) ? .allowed : .refused)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        removed = true
        headDeadline?.cancel()
    }

    private func armHeadDeadline(context: ChannelHandlerContext) {
        let channel = context.channel
        let statistics = settings.statistics
        headDeadline?.cancel()
        headDeadline = context.eventLoop.scheduleTask(in: settings.headTimeout) {
            statistics.countClosed(.headTimeout)
            channel.close(promise: nil)
        }
    }

    /// A client that shuts its sending side after its request (socat, `nc -N`) gets its answer,
    /// then the close; one that does so between requests is closed at once.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            inputClosed = true
            if case .waitingForHead = state { context.close(promise: nil) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch (unwrapInboundIn(data), state) {
        case (.head(let head), .waitingForHead):
            headDeadline?.cancel()
            headDeadline = nil
            state = .readingBody(head)
        case (.body, .readingBody):
            break
        case (.end, .readingBody(let head)):
            byteLimit.requestEnded()
            setAnswering(true)
            state = .answering
            answer(head, context: context)
        case (_, .closing):
            // A request pipelined after the last answer (`Connection: close`): not answered.
            break
        default:
            // Parts out of order cannot come from NIO's decoder; close rather than guess.
            context.close(promise: nil)
        }
    }

    /// Waits for the peer (looked up at the accept), asks the router, writes its answer.
    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        requests += 1
        let request = MetadataRequest(
            method: head.method.rawValue,
            target: head.uri,
            headers: head.headers.map { (name: $0.name, value: $0.value) }
        )
        let peerFuture =
            peerLookup ?? context.eventLoop.makeSucceededFuture(.unidentified(reason: "the peer was not looked up"))
        let router = settings.router
        let responsePromise = context.eventLoop.makePromise(of: (MetadataResponse, MetadataPeer).self)
        peerFuture.assumeIsolated().whenSuccess { peer in
            responsePromise.completeWithTask {
                guard let router = router.router else {
                    return (.unavailable("the endpoint is starting"), peer)
                }
                return (await router.respond(to: request, from: peer), peer)
            }
        }
        let pacer = settings.pacer
        responsePromise.futureResult.assumeIsolated().whenSuccess { response, peer in
            guard !self.removed else { return }
            let delay = pacer.delay(for: peer.uid)
            guard delay > .zero else {
                self.write(response, for: head, peer: peer, context: context)
                return
            }
            // An answer past the peer's pace waits its turn; the connection may make room meanwhile.
            self.setAnswering(false)
            context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
                guard !self.removed else { return }
                self.setAnswering(true)
                self.write(response, for: head, peer: peer, context: context)
            }
        }
    }

    private func write(
        _ response: MetadataResponse,
        for head: HTTPRequestHead,
        peer: MetadataPeer,
        context: ChannelHandlerContext
    ) {
        log(response, for: head, peer: peer)
        settings.statistics.countAnswer(response.outcome)
        let keepAlive = head.isKeepAlive && requests < settings.maxRequests && !inputClosed
        var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        headers.add(name: "Content-Length", value: "\(response.body.count)")
        headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        let status = HTTPResponseStatus(statusCode: response.status)
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
            promise: nil
        )
        // HEAD: the fields GET would get, Content-Length included, and no body (RFC 9110 9.3.2).
        if head.method != .HEAD, !response.body.isEmpty {
            var body = context.channel.allocator.buffer(capacity: response.body.count)
            body.writeBytes(response.body)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        // Ready for the next request before the end is written: NIO's pipelining handler hands
        // a request pipelined behind this one on as it passes the end, before the write completes.
        if keepAlive {
            byteLimit.answered()
            setAnswering(false)
            state = .waitingForHead
            armHeadDeadline(context: context)
        } else {
            state = .closing
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { result in
            guard !self.removed else { return }
            guard keepAlive, case .success = result else {
                context.close(promise: nil)
                return
            }
        }
    }

    private func log(_ response: MetadataResponse, for head: HTTPRequestHead, peer: MetadataPeer) {
        // `request`: its number on the connection (2 and on: a kept-alive connection).
        var metadata: Logger.Metadata = [
            "status": "\(response.status)", "method": "\(head.method.rawValue)", "request": "\(requests)",
        ]
        var uid: UInt32?
        switch peer {
        case .user(let user):
            metadata["uid"] = "\(user.uid)"
            uid = user.uid
        case .unidentified(let reason): metadata["peer"] = "\(reason)"
        }
        if let failure = response.failure {
            metadata["error"] = "\(failure)"
            settings.logger.warning("metadata endpoint: the token source failed", metadata: metadata)
        } else if response.status == 403 {
            metadata["outcome"] = "\(response.outcome.label)"
            settings.refusals.refused(uid: uid, metadata: metadata)
        } else {
            settings.logger.debug("metadata endpoint: request answered", metadata: metadata)
        }
    }

    /// The connection's (client, server) endpoints: its remote and local addresses.
    static func endpoints(of channel: any Channel) -> (client: IPEndpoint, server: IPEndpoint)? {
        guard let remote = channel.remoteAddress, let local = channel.localAddress,
            let remoteHost = remote.ipAddress, let localHost = local.ipAddress,
            let remotePort = remote.port, let localPort = local.port,
            let client = IPEndpoint(host: remoteHost, port: UInt16(truncatingIfNeeded: remotePort)),
            let server = IPEndpoint(host: localHost, port: UInt16(truncatingIfNeeded: localPort))
        else { return nil }
        return (client, server)
    }
}

extension MetadataPeer {
    /// The uid, when the kernel named one.
    var uid: UInt32? {
        if case .user(let user) = self { user.uid } else { nil }
    }
}

extension MetadataResponse {
    /// A 503 the server itself answers (`reason` is logged, not sent).
    static func unavailable(_ reason: String) -> MetadataResponse {
        var response = MetadataResponse(
            outcome: .unavailable,
            headers: [
                ("Metadata-Flavor", "Google"), ("Content-Type", "text/plain; charset=utf-8"),
                ("X-Content-Type-Options", "nosniff"),
            ],
            body: Array("503 Service Unavailable: try again\n".utf8)
        )
        response.failure = reason
        return response
    }
}
