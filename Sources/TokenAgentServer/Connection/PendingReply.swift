// What a connection owes: one pending reply per request, written in request order.
import TokenAgent
import TokenWire

extension RequestHandler {
    /// A reply as it waits to be written: a served token (written from its stored bytes) or a line.
    enum Reply {
        case token(ServedToken)
        case line(WireReply)

        static func error(_ error: WireError) -> Reply { .line(.error(error)) }
    }

    /// The reply a request is owed, in request order, by what it will be when its turn comes.
    enum PendingReply {
        /// A line or token ready to write, counted under `verb`.
        case reply(Reply, verb: RequestVerb)
        /// A `GET` or `REFRESH` answer: ready once its fetch ends, checked again at the head.
        case token(TokenAnswer)
        /// A `STATS` reply, made when its turn comes so it counts every request before it.
        case stats
        /// A `METRICS` reply, made when its turn comes, like `STATS`.
        case metrics
        /// An `INFO` reply about a key, made when its turn comes, so it tells what the requests
        /// before it brought.
        case info(kind: String, id: String)
        /// A segment's descriptor to send with its reply line (`SHM`), by the handler's own
        /// `sendmsg`; this reply owns the descriptor until it is sent.
        case offer(SharedSegments.Offer)
        /// `QUIT`: no reply; the connection closes once every reply before it is written.
        case quit
        /// An error after which the connection closes: a too-long or timed-out line, or a
        /// connection over the limits. Counted under `other`.
        case closingError(WireError)

        /// Whether it can be written now: everything but a token answer whose fetch runs is.
        var isReady: Bool {
            if case .token(let answer) = self { return answer.reply != nil }
            return true
        }

        /// What making it costs a turn beyond its line (``WorkCost``): the replies that render
        /// much; 0 for the others.
        var renderingCost: Int {
            switch self {
            case .info: WorkCost.info
            case .metrics: WorkCost.metrics
            case .stats: WorkCost.stats
            default: 0
            }
        }
    }

    /// A `GET`'s or `REFRESH`'s reply: a token or an error, `nil` while its fetch runs.
    struct TokenAnswer {
        var reply: Reply?
        /// `get` or `refresh`, as the reply is counted in `fleet_tokend_requests_total`.
        let verb: RequestVerb
        /// The key the token answers, so a token that aged past the serving floor while its
        /// reply waited behind slower ones can be looked up again (kept only for an answer
        /// queued behind another).
        let key: (kind: String, id: String, minValidity: Int?)?
        /// The kind, and the version of the access rules it was checked under: a token is
        /// written only if the rules in force then allow it.
        let kind: String
        let rulesVersion: Int
    }
}
