import Foundation
import Testing

@Suite("Local issuer, verified independently")
struct LocalIssuerIntegrationTests {
    @Test func mintedTokensVerifyWithOpenSSLAndCarryExactlyTheClaims() async throws {
        let openssl = try #require(which("openssl"), "openssl must be installed (scripts/test installs it)")
        let directory = try AgentProcess.makeTemporaryDirectory()
        let keyPath = directory.appendingPathComponent("key.pem").path
        let publicPath = directory.appendingPathComponent("public.pem").path
        #expect(
            try await run(
                openssl,
                ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", keyPath]
            )
            .status == 0
        )
        #expect(try await run(openssl, ["pkey", "-in", keyPath, "-pubout", "-out", publicPath]).status == 0)
        let pem = try String(contentsOfFile: keyPath, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"), "PKCS#8, as Google's keys are")
        let account: [String: String] = [
            "type": "service_account", "project_id": "demo", "private_key_id": "0123abcd",
            "private_key": pem, "client_email": "fleet-engine@demo.iam.gserviceaccount.com",
        ]
        let accountPath = directory.appendingPathComponent("account.json").path
        try JSONSerialization.data(withJSONObject: account).write(to: URL(fileURLWithPath: accountPath))

        let agent = try await AgentProcess([
            "--issuer-key", accountPath, "--issuer-lifetime", "1200", "--log-level", "debug",
        ])
        let kinds = [
            ("vehicle", "vehicleid"), ("trip", "tripid"), ("delivery-vehicle", "deliveryvehicleid"), ("task", "taskid"),
            ("tracking", "trackingid"),
        ]
        for (kind, claim) in kinds {
            let before = Int(Date().timeIntervalSince1970)
            let reply = try #require(try await agent.send("GET \(kind) id-\(kind)").first)
            let token = try #require(tokenOf(reply), "\(reply)")
            let after = Int(Date().timeIntervalSince1970)
            let header = try #require(jwtPart(token, 0))
            #expect(header as NSDictionary == ["alg": "RS256", "typ": "JWT", "kid": "0123abcd"] as NSDictionary)
            let claims = try #require(jwtPart(token, 1))
            #expect(Set(claims.keys) == ["iss", "sub", "aud", "iat", "exp", "authorization"])
            #expect(claims["iss"] as? String == "fleet-engine@demo.iam.gserviceaccount.com")
            #expect(claims["sub"] as? String == "fleet-engine@demo.iam.gserviceaccount.com")
            #expect(claims["aud"] as? String == "https://fleetengine.googleapis.com/")
            let iat = try #require(claims["iat"] as? Int)
            #expect(iat >= before - 1 && iat <= after)
            #expect(claims["exp"] as? Int == iat + 1200)
            #expect(claims["authorization"] as? [String: String] == [claim: "id-\(kind)"])
            #expect(Int(reply.split(separator: " ")[2]) == iat + 1200)

            // Verify the RS256 signature with openssl, independent of the agent's crypto.
            let parts = token.split(separator: ".").map(String.init)
            let inputPath = directory.appendingPathComponent("input").path
            let signaturePath = directory.appendingPathComponent("signature").path
            try Data("\(parts[0]).\(parts[1])".utf8).write(to: URL(fileURLWithPath: inputPath))
            try base64URL(parts[2]).write(to: URL(fileURLWithPath: signaturePath))
            let verify = try await run(
                openssl,
                ["dgst", "-sha256", "-verify", publicPath, "-signature", signaturePath, inputPath]
            )
            #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
            #expect(verify.stdout.contains("Verified OK"))
            // A changed claim must not verify.
            try Data("\(parts[0]).\(parts[1])x".utf8).write(to: URL(fileURLWithPath: inputPath))
            #expect(
                try await run(
                    openssl,
                    ["dgst", "-sha256", "-verify", publicPath, "-signature", signaturePath, inputPath]
                )
                .status != 0
            )
        }
        let log = agent.log
        #expect(await agent.stop() == 0)
        #expect(!log.contains("PRIVATE KEY"))
        #expect(!log.contains(String(pem.split(separator: "\n")[1])), "no key material in the logs")
    }

    private func base64URL(_ text: String) -> Data {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)!
    }
}
