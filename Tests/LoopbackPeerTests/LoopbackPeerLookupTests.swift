import LoopbackPeer
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The owner of a loopback connection's client end, as the kernel reports it.
@Suite struct LoopbackPeerLookupTests {
    private let lookup = LoopbackPeerLookup()

    /// The (client, server) endpoints of `client`'s connection, as the server sees them.
    private func endpoints(of client: LoopbackSocket) throws -> (client: IPEndpoint, server: IPEndpoint) {
        let local = try client.localAddress()
        let remote = try client.remoteAddress()
        return (IPEndpoint(host: local.host, port: local.port)!, IPEndpoint(host: remote.host, port: remote.port)!)
    }

    @Test(arguments: ["127.0.0.1", "::1"])
    func aConnectionFromThisProcessIsOurs(host: String) throws {
        let listener = try LoopbackSocket.listener(host: host)
        let client = try LoopbackSocket.connect(to: host, port: try listener.localAddress().port)
        let (clientEnd, serverEnd) = try endpoints(of: client)
        #expect(try lookup.uid(ofPeer: clientEnd, connectedTo: serverEnd) == getuid())
    }

    @Test func anIPv6SocketOfMappedAddressesCountsForItsIPv4Addresses() async throws {
        let listener = try LoopbackSocket.listener(host: "127.0.0.1")
        let port = try listener.localAddress().port
        let client = try LoopbackSocket.connect(to: "::ffff:127.0.0.1", port: port)
        // The server sees an IPv4 peer.
        let accepted = try await offPool { try listener.accept() }
        let remote = try accepted.remoteAddress()
        let local = try accepted.localAddress()
        #expect(remote.host == "127.0.0.1")
        let clientEnd = IPEndpoint(host: remote.host, port: remote.port)!
        let serverEnd = IPEndpoint(host: local.host, port: local.port)!
        #expect(try lookup.uid(ofPeer: clientEnd, connectedTo: serverEnd) == getuid())
        _ = client
    }

    @Test(arguments: ["127.0.0.1", "::1"])
    func aConnectionFromAnotherUsersProcessIsTheirs(host: String) async throws {
        try #require(getuid() == 0, "setpriv to uid 65534 needs root")
        let listener = try LoopbackSocket.listener(host: host)
        let port = try listener.localAddress().port
        let script = """
            import socket, sys, time
            s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
            time.sleep(60)
            """
        let child = try TestProcess([
            "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            // The system's Python: root's pyenv shims are not readable by uid 65534.
            "/usr/bin/python3", "-c", script, host, String(port),
        ])
        defer { child.signal(SIGKILL) }
        let accepted = try await offPool { try listener.accept() }
        let remote = try accepted.remoteAddress()
        let local = try accepted.localAddress()
        let uid = try lookup.uid(
            ofPeer: IPEndpoint(host: remote.host, port: remote.port)!,
            connectedTo: IPEndpoint(host: local.host, port: local.port)!
        )
        #expect(uid == 65534)
        child.signal(SIGKILL)
        _ = try await child.wait()
    }

    @Test(arguments: ["127.0.0.1", "::1"])
    func aFourTupleNobodyHoldsIsAnError(host: String) throws {
        let listener = try LoopbackSocket.listener(host: host)
        let client = try LoopbackSocket.connect(to: host, port: try listener.localAddress().port)
        let (clientEnd, serverEnd) = try endpoints(of: client)
        // The same ports the other way round are the server's end (still in the listener's
        // queue): a socket of this process too.
        #expect(try lookup.uid(ofPeer: serverEnd, connectedTo: clientEnd) == getuid())
        // From the listener's own port to itself: no socket has that.
        #expect(throws: PeerLookupError.noSocket(client: serverEnd, server: serverEnd)) {
            try lookup.uid(ofPeer: serverEnd, connectedTo: serverEnd)
        }
        // The client's port to another server port.
        let elsewhere = IPEndpoint(addressBytes: serverEnd.addressBytes, port: serverEnd.port &+ 1)!
        #expect(throws: PeerLookupError.noSocket(client: clientEnd, server: elsewhere)) {
            try lookup.uid(ofPeer: clientEnd, connectedTo: elsewhere)
        }
    }

    @Test func mixedFamiliesAreAnError() throws {
        let client = IPEndpoint(host: "127.0.0.1", port: 1000)!
        let server = IPEndpoint(host: "::1", port: 2000)!
        #expect(throws: PeerLookupError.mixedFamilies(client: client, server: server)) {
            try lookup.uid(ofPeer: client, connectedTo: server)
        }
    }

    @Test func aClosedConnectionHasNoOwner() async throws {
        let listener = try LoopbackSocket.listener(host: "127.0.0.1")
        var client: LoopbackSocket? = try LoopbackSocket.connect(
            to: "127.0.0.1",
            port: try listener.localAddress().port
        )
        let (clientEnd, serverEnd) = try endpoints(of: client!)
        var accepted: LoopbackSocket? = try await offPool { try listener.accept() }
        // The client closes first, so its end goes to TIME_WAIT once the server closes too.
        client = nil
        accepted = nil
        _ = (client, accepted)
        var outcome: PeerLookupError?
        // Until the kernel has moved the socket on (a hang detector, not a latency bound).
        let deadline = ContinuousClock.now + hangLimitDuration
        while ContinuousClock.now < deadline {
            do {
                _ = try lookup.uid(ofPeer: clientEnd, connectedTo: serverEnd)
            } catch {
                outcome = error
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        // TIME_WAIT (reported with uid 0 for everyone) is refused; a lookup that races the
        // kernel's own close may find no socket at all.
        let refusals: [PeerLookupError] = [
            .unownedState(client: clientEnd, server: serverEnd, state: 6),
            .noSocket(client: clientEnd, server: serverEnd),
        ]
        #expect(outcome.map(refusals.contains) == true)
    }
}
