import AsyncHTTPClient
import FakeGoogle
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
import TokenAgent
import _CryptoExtras

/// A directory of its own under the system's temporary one, removed by ``remove()``.
struct TemporaryDirectory {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "fleet-tokend-credentials-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// Writes `data` to `name` (directories made as needed) and returns the file's path.
    @discardableResult
    func write(_ name: String, _ data: Data) throws -> String {
        let file = path + "/" + name
        try FileManager.default.createDirectory(
            atPath: (file as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true
        )
        try data.write(to: URL(fileURLWithPath: file))
        return file
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// The system's clocks as they read when it was made, moved only by ``advance(_:)``: a window a
/// test is inside stays open however long a loaded machine takes between two calls, and ends only
/// when the test moves the clock past it.
final class HeldClock: AgentClock, Sendable {
    private let readings: Mutex<(mono: Double, wall: Double)>

    init() {
        let system = SystemAgentClock()
        readings = Mutex((system.monotonicSeconds, system.wallSeconds))
    }

    var monotonicSeconds: Double { readings.withLock { $0.mono } }
    var wallSeconds: Double { readings.withLock { $0.wall } }

    func advance(_ seconds: Double) {
        readings.withLock {
            $0.mono += seconds
            $0.wall += seconds
        }
    }
}

/// Test keys, made once per process.
enum TestKeys {
    static let rsa = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    /// A service-account key file's JSON.
    static func serviceAccount(
        email: String = "svc@project.iam.gserviceaccount.com",
        tokenURI: String? = "https://oauth2.googleapis.com/token",
        type: String = "service_account",
        dropping: String? = nil
    ) -> Data {
        var object: [String: String] = [
            "type": type, "client_email": email, "private_key_id": "kid-1", "private_key": rsa.pkcs8PEMRepresentation,
        ]
        if let tokenURI { object["token_uri"] = tokenURI }
        if let dropping { object.removeValue(forKey: dropping) }
        return try! JSONSerialization.data(withJSONObject: object)
    }

    /// An authorized-user file's JSON.
    static func authorizedUser(tokenURI: String? = nil, quotaProject: String? = nil) -> Data {
        var object: [String: String] = [
            "type": "authorized_user", "client_id": "cid.apps.googleusercontent.com",
            "client_secret": "very-secret", "refresh_token": "1//refresh-secret",
        ]
        if let tokenURI { object["token_uri"] = tokenURI }
        if let quotaProject { object["quota_project_id"] = quotaProject }
        return try! JSONSerialization.data(withJSONObject: object)
    }
}

/// The tests' tuning: loopback only, but a full parallel run on two cores can keep the fake's
/// event loop from accepting for over a second (a 1 s connect time-out failed in CI), so the
/// time-outs are wide; a test of a hanging server sets its own short `timeout`.
let fastTuning = HostAccessTokenSource.Tuning(connectTimeout: 10, timeout: 10)

/// Makes the source for `origin`, runs `body` with it, and shuts it down.
func withSource<T>(
    _ origin: HostCredentials.Origin,
    tuning: HostAccessTokenSource.Tuning = fastTuning,
    clock: any AgentClock = SystemAgentClock(),
    _ body: (HostAccessTokenSource) async throws -> T
) async throws -> T {
    let source = try HostCredentials.source(for: origin, tuning: tuning, clock: clock)
    do {
        let result = try await body(source)
        await source.shutdown()
        return result
    } catch {
        await source.shutdown()
        throw error
    }
}

/// Runs `body` with a fake started for it, stopping the fake after.
func withFake<T>(_ body: (FakeGoogle) async throws -> T) async throws -> T {
    let fake = try await FakeGoogle.start()
    do {
        let result = try await body(fake)
        await fake.stop()
        return result
    } catch {
        await fake.stop()
        throw error
    }
}

/// The credentials error `body` throws, or `nil` when it throws none.
func credentialsError(_ body: () async throws(CredentialsError) -> AccessToken) async -> CredentialsError? {
    do {
        _ = try await body()
        return nil
    } catch {
        return error
    }
}

/// The configuration error `body` throws, or `nil`.
func configurationError<T>(_ body: () throws(ConfigurationError) -> T) -> ConfigurationError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

/// A plain HTTP exchange with the fake: status, headers and body.
func httpExchange(
    _ url: String,
    method: HTTPMethod = .GET,
    headers: [(String, String)] = [],
    body: [UInt8]? = nil
) async throws -> (status: Int, headers: HTTPHeaders, body: [UInt8]) {
    var request = HTTPClientRequest(url: url)
    request.method = method
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
    let bytes = try await response.body.collect(upTo: 1024 * 1024)
    return (Int(response.status.code), response.headers, Array(buffer: bytes))
}

/// Calls the fake's `signJwt` for `account` with `claims`, authorized by `token`.
func signJwt(
    _ fake: FakeGoogle,
    account: String,
    claims: [String: Any],
    token: String?,
    userProject: String? = nil
) async throws -> (status: Int, headers: HTTPHeaders, json: [String: Any]) {
    let payload = String(
        decoding: try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys]),
        as: UTF8.self
    )
    var headers = [("Content-Type", "application/json")]
    if let token { headers.append(("Authorization", "Bearer \(token)")) }
    if let userProject { headers.append(("x-goog-user-project", userProject)) }
    let reply = try await httpExchange(
        fake.signJwtURL(account: account),
        method: .POST,
        headers: headers,
        body: Array(try JSONSerialization.data(withJSONObject: ["payload": payload]))
    )
    let json = (try? JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any]) ?? [:]
    return (reply.status, reply.headers, json)
}
