import Foundation
import NIOPosix
import Synchronization
import _CryptoExtras

/// One `signJwt` call the fake received, whatever it answered.
public struct SignJwtCall: Sendable {
    /// The service account in the path (percent-decoded).
    public var account: String
    /// The `payload` of the request body (the claims JSON as a string), `nil` when absent.
    public var payload: String?
    /// The `x-goog-user-project` header, if sent.
    public var userProject: String?
    /// The Bearer token of the `Authorization` header, if sent.
    public var accessToken: String?
    /// When it arrived.
    public var receivedAt: Date
    /// The HTTP status answered (200 for a signature; 0 when the connection was dropped or left
    /// unanswered by a fault).
    public var status: Int

    /// The payload's claims as JSON, when it is a JSON object.
    public var claims: [String: Any]? { payload.flatMap { FakeJSON.object(Array($0.utf8)) } }
}

/// One request to the OAuth token endpoint.
public struct TokenEndpointRequest: Sendable {
    /// `grant_type` as sent.
    public var grantType: String?
    /// The HTTP status answered (0: dropped or left unanswered by a fault).
    public var status: Int
    /// When it arrived.
    public var receivedAt: Date
}

/// One request to the metadata server's token path.
public struct MetadataRequest: Sendable {
    /// The `Metadata-Flavor` header as sent.
    public var flavor: String?
    /// The HTTP status answered (0: dropped or left unanswered by a fault).
    public var status: Int
    /// When it arrived.
    public var receivedAt: Date
}

/// An access token the fake issued.
public struct IssuedAccessToken: Sendable {
    /// The token.
    public var value: String
    /// Which API issued it.
    public var issuer: FakeGoogleAPI
    /// Whom for: a service account's email, the authorized user's client id, the instance's
    /// service account, or (issuer ``FakeGoogleAPI/sts``) a federated principal
    /// (``FakeGoogle/principal(audience:subject:)``).
    public var subject: String
    /// When it expires.
    public var expiresAt: Date
}

/// An RSA key of the fake, with its id (40 hex digits, like Google's).
struct FakeKey: Sendable {
    var key: _RSA.Signing.PrivateKey
    var keyID: String
}

/// RSA keys are slow to make: one per name per process, made on a thread of the NIO pool.
enum FakeKeyPool {
    private static let keys = Mutex<[String: _RSA.Signing.PrivateKey]>([:])

    static func key(named name: String) async throws -> _RSA.Signing.PrivateKey {
        if let key = keys.withLock({ $0[name] }) { return key }
        let made = try await NIOThreadPool.singleton.runIfActive { try _RSA.Signing.PrivateKey(keySize: .bits2048) }
        return keys.withLock { keys in
            if let key = keys[name] { return key }
            keys[name] = made
            return made
        }
    }
}
