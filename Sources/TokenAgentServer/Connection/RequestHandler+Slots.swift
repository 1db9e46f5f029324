// What a connection owes: one slot per request, written in request order.
import TokenAgent
import TokenWire

extension RequestHandler {
    /// A reply as it waits to be written: a served token (written from its stored bytes) or a line.
    enum Reply {
        case token(ServedToken)
        case line(WireReply)

        static func error(_ error: WireError) -> Reply { .line(.error(error)) }
    }

    /// A reply slot, in request order.
    struct Slot {
        var reply: Reply?
        /// A segment's descriptor to send with its reply line (SHM), by the handler's own `sendmsg`.
        var offer: SharedSegments.Offer?
        var closeAfter = false
        /// A STATS reply, made when its turn comes so it counts every request before it.
        var statsWhenDue = false
        /// A METRICS reply, made when its turn comes, like STATS.
        var metricsWhenDue = false
        /// An INFO reply about ``key``, made when its turn comes, so it tells what the requests
        /// before it brought.
        var infoWhenDue = false
        /// The verb the reply is counted under in `fleet_tokend_requests_total`.
        var verb = RequestVerb.other
        /// The key a token reply answers, so a token that aged past the serving floor while its
        /// reply waited behind slower ones can be looked up again (set only on a slot queued behind another).
        var key: (kind: String, id: String, minValidity: Int?)?
        /// The kind a token reply is for (GET, REFRESH), and the version of the access rules it
        /// was checked under: a token is written only if the rules in force then allow it.
        var kind: String?
        var rulesVersion = 0

        var isReady: Bool {
            reply != nil || closeAfter || statsWhenDue || metricsWhenDue || infoWhenDue || offer != nil
        }
    }
}
