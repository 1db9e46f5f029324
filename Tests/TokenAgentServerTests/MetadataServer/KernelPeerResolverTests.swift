import LoopbackPeer
import MetadataEndpoint
import TestSupport
import Testing
import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// A resolver for a user namespace other than the initial one.
@Suite struct MetadataOverflowUIDTests {
    @Test func outsideTheInitialNamespaceTheOverflowUIDIsNobodyInParticular() async throws {
        let client = try LoopbackSocket.listener(host: "127.0.0.1")
        let connection = try LoopbackSocket.connect(to: "127.0.0.1", port: try client.localAddress().port)
        let local = try connection.localAddress()
        let remote = try connection.remoteAddress()
        let ends = (IPEndpoint(host: local.host, port: local.port)!, IPEndpoint(host: remote.host, port: remote.port)!)
        let ours = getuid()
        let peer = KernelPeerResolver(ambiguousUID: ours).peer(client: ends.0, server: ends.1)
        guard case .unidentified(let reason) = peer else {
            Issue.record("the overflow uid was taken for a user: \(peer)")
            return
        }
        #expect(reason.contains("overflow uid"))
        #expect(KernelPeerResolver(ambiguousUID: nil).peer(client: ends.0, server: ends.1) != peer)
    }
}
