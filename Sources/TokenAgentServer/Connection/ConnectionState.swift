/// Where a connection served by a ``RequestHandler`` is in its life. It only moves forward, in
/// this order, though it may skip states: a stalled peer is closed from any state, and a
/// connection whose transport closed is closed whatever it was doing.
enum ConnectionState {
    /// Taking requests.
    case open
    /// Taking no more requests; the connection closes once every reply owed is written. After
    /// `QUIT`, a too-long or timed-out line, or a refused connection (the reply that ends it
    /// closes it when it reaches the head), and on graceful shutdown (``RequestHandler/quiesce()``).
    case finishing
    /// The last reply is handed to the transport: once it is written the connection closes, or
    /// lingers if the client may still be sending.
    case closing
    /// After the last reply: our side is shut, and the client's input is read and dropped until
    /// it ends (or for a second): closing with unread input would reset the connection and could
    /// destroy replies the client has not read.
    case lingering
    /// Closed: the transport said so, or a peer that left its replies unread was cut off.
    case closed

    /// Whether requests are taken: only while open.
    var takesRequests: Bool { self == .open }

    /// Whether no more reply goes out: the last is written, or the connection is gone.
    var isClosed: Bool {
        switch self {
        case .open, .finishing: return false
        case .closing, .lingering, .closed: return true
        }
    }
}
