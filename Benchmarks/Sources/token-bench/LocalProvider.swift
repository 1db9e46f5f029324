import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A token provider on 127.0.0.1: `GET /token/<kind>/<id>` answers
/// `{"token": <JWT-sized token>, "expires_in": 3600}` from memory, as fast as NIO can; for kind
/// `custom`, after ``slowKindDelay`` (a slow provider to flood).
final class LocalProvider: Sendable {
    let port: Int
    private let channel: any Channel

    static func start() async throws -> LocalProvider {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(Handler())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return LocalProvider(channel: channel)
    }

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress!.port!
    }

    func url(kind: String) -> String { "http://127.0.0.1:\(port)/token/\(kind)/{id}" }

    /// How long kind `custom` takes to answer.
    static let slowKindDelay = TimeAmount.milliseconds(500)

    func stop() async { try? await channel.close() }

    /// A token the size of a real Fleet Engine JWT (about 800 bytes) for `id`.
    static func token(for id: String, kind: String) -> String {
        let claim = kind == "trip" ? "tripid" : "vehicleid"
        let now = Int(Date().timeIntervalSince1970)
        func b64(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let header = b64(#"{"alg":"RS256","typ":"JWT","kid":"0123456789abcdef0123456789abcdef01234567"}"#)
        let claims = b64(
            #"{"iss":"fleet-engine@project.iam.gserviceaccount.com","sub":"fleet-engine@project.iam.gserviceaccount.com","aud":"https://fleetengine.googleapis.com/","iat":\#(now),"exp":\#(now + 3600),"authorization":{"\#(claim)":"\#(id)"}}"#
        )
        let signature = b64(String(repeating: "s", count: 256))
        return "\(header).\(claims).\(signature)"
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private var uri = ""

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head): uri = head.uri
            case .body: break
            case .end:
                let parts = uri.split(separator: "/")
                let kind = parts.count == 3 ? String(parts[1]) : "vehicle"
                let id = parts.last.map(String.init) ?? "x"
                let body = #"{"token":"\#(LocalProvider.token(for: id, kind: kind))","expires_in":3600}"#
                let headers = HTTPHeaders([
                    ("Content-Type", "application/json"), ("Content-Length", "\(body.utf8.count)"),
                ])
                let respond = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                let reply = {
                    let (handler, context) = respond.value
                    context.write(
                        handler.wrapOutboundOut(
                            .head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))
                        ),
                        promise: nil
                    )
                    context.write(handler.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil)
                    context.writeAndFlush(handler.wrapOutboundOut(.end(nil)), promise: nil)
                }
                if kind == "custom" {
                    context.eventLoop.assumeIsolated().scheduleTask(in: LocalProvider.slowKindDelay) { reply() }
                } else {
                    reply()
                }
            }
        }
    }
}
