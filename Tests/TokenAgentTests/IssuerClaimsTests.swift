import Crypto
import Foundation
import Testing
import TokenAgent
import TokenWire
import _CryptoExtras

@Suite("Issuers: claims and key files")
struct IssuerClaimsTests {
    @Test func theWildcardKindsCarryTheJavaLibrarysEntries() {
        let claims = IssuerClaims()
        #expect(claims.authorization(kind: "server", id: "*") == ["vehicleid": "*", "tripid": "*"])
        #expect(
            claims.authorization(kind: "delivery-server", id: "*")
                == ["deliveryvehicleid": "*", "taskid": "*", "trackingid": "*"]
        )
        #expect(
            claims.authorization(kind: "fleet-reader", id: "*")
                == ["vehicleid": "*", "tripid": "*", "deliveryvehicleid": "*", "taskid": "*", "trackingid": "*"]
        )
        #expect(
            claims.authorization(kind: "delivery-fleet-reader", id: "*")
                == ["deliveryvehicleid": "*", "taskid": "*", "trackingid": "*"]
        )
        for kind in ["server", "delivery-server", "fleet-reader", "delivery-fleet-reader"] {
            #expect(claims.authorization(kind: kind, id: "v-1") == nil, "a wildcard kind signs only *")
        }
    }

    @Test func perIDKindsNeverSignAWildcardOrADotSegment() {
        let claims = IssuerClaims(
            claimNames: FleetEngineKinds.claimNames.merging(["trusted": "deliveryvehicleid"]) { $1 }
        )
        #expect(claims.authorization(kind: "vehicle", id: "v-1") == ["vehicleid": "v-1"])
        #expect(claims.authorization(kind: "trusted", id: "d-1") == ["deliveryvehicleid": "d-1"])
        for id in ["*", ".", "..", "＊"] { #expect(claims.authorization(kind: "vehicle", id: id) == nil) }
        #expect(claims.authorization(kind: "unknown", id: "x") == nil)
    }

    /// A service-account key file and its RSA key.
    private func keyFile(email: String, directory: URL) throws -> (path: String, key: _RSA.Signing.PrivateKey) {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let json: [String: String] = [
            "type": "service_account", "private_key": key.pkcs8PEMRepresentation,
            "private_key_id": "kid-\(email.prefix(4))", "client_email": email,
        ]
        let path = directory.appendingPathComponent("\(email).json").path
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
        return (path, key)
    }

    private func claims(_ token: String) throws -> [String: Any] {
        let part = try #require(token.split(separator: ".").dropFirst().first)
        let data = try #require(StrictBase64URL.decode(part))
        return try #require(try JSONSerialization.jsonObject(with: Data(data)) as? [String: Any])
    }

    private func verifies(_ token: String, with key: _RSA.Signing.PrivateKey) throws -> Bool {
        let parts = token.split(separator: ".")
        let signature = _RSA.Signing.RSASignature(rawRepresentation: try #require(StrictBase64URL.decode(parts[2])))
        return key.publicKey.isValidSignature(
            signature,
            for: Array("\(parts[0]).\(parts[1])".utf8),
            padding: .insecurePKCS1v1_5
        )
    }

    @Test func eachKindSignsWithItsOwnKeyAndTheRestKeepTheDefault() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("issuers-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let driver = try keyFile(email: "driver@p.iam.gserviceaccount.com", directory: directory)
        let consumer = try keyFile(email: "consumer@p.iam.gserviceaccount.com", directory: directory)
        let server = try keyFile(email: "server@p.iam.gserviceaccount.com", directory: directory)
        let fallback = try keyFile(email: "default@p.iam.gserviceaccount.com", directory: directory)
        var configuration = AgentConfiguration()
        configuration.issuerKeyPath = fallback.path
        configuration.issuers = [
            "vehicle": IssuerSettings(keyFile: driver.path),
            "trip": IssuerSettings(keyFile: consumer.path),
            "server": IssuerSettings(keyFile: server.path),
            "trusted": IssuerSettings(keyFile: driver.path),
        ]
        configuration.issuers["trip"]?.lifetime = 900
        configuration.issuers["trusted"]?.claim = "deliveryvehicleid"
        configuration.access.allow["server"] = PrincipalList(users: [.number(0)])
        try configuration.validate()
        try configuration.checkAccessKinds()
        let built = try ProviderSet.build(from: configuration)
        #expect(Set(built.providers.keys) == Set(FleetEngineKinds.all + ["server", "trusted"]))

        let cases:
            [(kind: String, id: String, key: _RSA.Signing.PrivateKey, email: String, authorization: [String: String])] =
                [
                    ("vehicle", "v-1", driver.key, "driver@p.iam.gserviceaccount.com", ["vehicleid": "v-1"]),
                    ("trip", "t-1", consumer.key, "consumer@p.iam.gserviceaccount.com", ["tripid": "t-1"]),
                    ("server", "*", server.key, "server@p.iam.gserviceaccount.com", ["vehicleid": "*", "tripid": "*"]),
                    ("trusted", "d-1", driver.key, "driver@p.iam.gserviceaccount.com", ["deliveryvehicleid": "d-1"]),
                    ("task", "k-1", fallback.key, "default@p.iam.gserviceaccount.com", ["taskid": "k-1"]),
                ]
        for item in cases {
            let provider = try #require(built.providers[item.kind])
            let token = try await provider.fetchToken(for: TokenKey(kind: item.kind, id: item.id)).token
            #expect(try verifies(token, with: item.key), "\(item.kind)")
            let claims = try claims(token)
            #expect(claims["iss"] as? String == item.email)
            #expect(claims["sub"] as? String == item.email)
            #expect(claims["authorization"] as? [String: String] == item.authorization)
            let lifetime = (claims["exp"] as? Int ?? 0) - (claims["iat"] as? Int ?? 0)
            #expect(lifetime == (item.kind == "trip" ? 900 : 3600))
        }
        await #expect(throws: ProviderError.self) {
            _ = try await built.providers["server"]!.fetchToken(for: TokenKey(kind: "server", id: "v-1"))
        }
        await #expect(throws: ProviderError.self) {
            _ = try await built.providers["vehicle"]!.fetchToken(for: TokenKey(kind: "vehicle", id: "*"))
        }

        // A reload with the same settings keeps every issuer; a changed one is new.
        var changed = configuration
        changed.issuers["trip"]?.lifetime = 1200
        let rebuilt = try ProviderSet.build(from: changed, reusing: built)
        #expect(rebuilt.changedKinds(since: built) == ["trip"])
        for provider in built.providers.values { await provider.shutdown() }
    }

    @Test func noWildcardKindComesFromTheDefaultKeyOrTheDemoIssuer() throws {
        var configuration = AgentConfiguration()
        configuration.demo = true
        let demo = try ProviderSet.build(from: configuration)
        #expect(Set(demo.providers.keys) == Set(FleetEngineKinds.all))
    }
}
