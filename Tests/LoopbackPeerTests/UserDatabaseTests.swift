import LoopbackPeer
import Testing

/// A uid's groups from the user database.
@Suite struct UserDatabaseTests {
    @Test func rootIsInGroupZero() throws {
        let root = try UserDatabase().groups(ofUID: 0)
        #expect(root.primaryGID == 0)
        #expect(root.groups.contains(0))
    }

    @Test func nobodyIsInNogroup() throws {
        let nobody = try UserDatabase().groups(ofUID: 65534)
        #expect(nobody.primaryGID == 65534)
        #expect(nobody.groups.contains(65534))
    }

    @Test func aUIDWithoutAnEntryIsAnError() {
        #expect(throws: UserDatabaseError.noSuchUser(uid: 54_321)) { try UserDatabase().groups(ofUID: 54_321) }
    }
}
