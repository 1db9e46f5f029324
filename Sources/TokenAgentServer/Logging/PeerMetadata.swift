import Logging
import TokenAgent

extension PeerCredentials {
    /// The log fields that name this peer: `peer_uid`, and `peer_pid` only when the kernel gave
    /// one. A peer outside the agent's PID namespace (a worker in another container, the agent in
    /// a pod without `hostPID`) has pid 0 in `SO_PEERCRED`, which names no process: such a peer is
    /// logged by its uid alone.
    var logMetadata: Logger.Metadata {
        var metadata: Logger.Metadata = ["peer_uid": "\(uid)"]
        if let pid = visiblePID { metadata["peer_pid"] = "\(pid)" }
        return metadata
    }

    /// The log fields for `peer`, or `peer_credentials=unknown` when the kernel reported none.
    static func logMetadata(_ peer: PeerCredentials?) -> Logger.Metadata {
        peer?.logMetadata ?? ["peer_credentials": "unknown"]
    }
}
