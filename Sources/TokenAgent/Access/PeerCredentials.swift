/// Who is at the other end of a connection, as the kernel reported it when the peer connected
/// (`SO_PEERCRED` and `SO_PEERGROUPS`).
public struct PeerCredentials: Sendable, Hashable {
    /// The peer's process id when it connected.
    public var pid: Int32
    /// The peer's effective user id.
    public var uid: UInt32
    /// The peer's effective group id.
    public var gid: UInt32
    /// The peer's supplementary groups.
    public var groups: [UInt32]
    /// Whether the peer is in the agent's own PID namespace, as the kernel told through the
    /// peer's pidfd; `false` when it is not, or that could not be told. A positive pid is no
    /// proof: the agent sees the processes of its child namespaces with positive pids too.
    public var inAgentPIDNamespace: Bool

    /// Creates credentials.
    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32] = [], inAgentPIDNamespace: Bool = false) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.inAgentPIDNamespace = inAgentPIDNamespace
    }

    /// The peer's pid when it names a process the agent can see: in its PID namespace or one
    /// of that namespace's children; `nil` for a peer outside them, whose pid the kernel reports
    /// as 0 (a worker in another container).
    public var visiblePID: Int32? { pid > 0 ? pid : nil }
}
