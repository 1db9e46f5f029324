import LoopbackPeer
import Testing

/// Whether the overflow uid can be taken for a user.
@Suite struct UserNamespaceTests {
    @Test func theInitialNamespaceMapsEveryUID() {
        #expect(UserNamespace.isIdentityMap("         0          0 4294967295\n"))
    }

    @Test(arguments: ["0 100000 65536\n", "0 0 4294967295\n1 1 1\n", "", "0 1000 1\n"])
    func anyOtherMapLeavesSomeUnmapped(map: String) {
        #expect(!UserNamespace.isIdentityMap(map))
    }
}
