import MetadataEndpoint
import TestSupport
import Testing
import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// The endpoint over real HTTP, with curl as the client and the kernel naming the peer.
@Suite struct MetadataCurlTests {
    static let flavor = ["-H", "Metadata-Flavor: Google"]
    static let tokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"

    @Test(arguments: ["127.0.0.1", "::1"])
    func thePingAndTheTokenAnswer(host: String) async throws {
        let log = try await MetadataServerFixture.withServer(host: host) { address, tokens in
            let root = "http://\(address)"
            let ping = try await curl(Self.flavor + [root + "/"])
            #expect(ping.status == 200)
            #expect(ping.value(of: "Metadata-Flavor") == "Google")
            #expect(ping.value(of: "Content-Type") == "application/text")
            #expect(ping.body == "computeMetadata/\n")

            let token = try await curl(Self.flavor + [root + Self.tokenPath])
            #expect(token.status == 200)
            #expect(token.value(of: "Content-Type") == "application/json")
            #expect(token.body.hasPrefix(#"{"access_token":"ya29.fake-fleet-admin-token","expires_in":"#))
            #expect(token.body.hasSuffix(#","token_type":"Bearer"}"#))
            #expect(tokens.calls == 1)

            let project = try await curl(Self.flavor + [root + "/computeMetadata/v1/project/project-id"])
            #expect(project.body == "fleet-test")
            #expect(!(project.headers.contains { $0.name.lowercased().hasPrefix("access-control-") }))
        }
        // Tokens are never logged.
        #expect(!log.contains { $0.contains("ya29") })
    }

    @Test func theRefusals() async throws {
        try await MetadataServerFixture.withServer { address, tokens in
            let root = "http://\(address)"
            let noFlavor = try await curl([root + Self.tokenPath])
            #expect(noFlavor.status == 403)
            #expect(noFlavor.value(of: "Metadata-Flavor") == "Google")
            #expect(noFlavor.body.contains("Metadata-Flavor"))

            let forwarded = try await curl(Self.flavor + ["-H", "X-Forwarded-For: 10.0.0.1", root + Self.tokenPath])
            #expect(forwarded.status == 403)
            let forwarded7239 = try await curl(Self.flavor + ["-H", "Forwarded: for=10.0.0.1", root + Self.tokenPath])
            #expect(forwarded7239.status == 403)

            let rebound = try await curl(
                Self.flavor + ["-H", "Host: attacker.example:\(address.port)", root + Self.tokenPath]
            )
            #expect(rebound.status == 403)
            #expect(rebound.body.contains("attacker.example"))

            let scopes = try await curl(
                Self.flavor + [
                    root + Self.tokenPath + "?scopes=https://www.googleapis.com/auth/devstorage.full_control"
                ]
            )
            #expect(scopes.status == 403)
            #expect(scopes.body.contains("https://www.googleapis.com/auth/devstorage.full_control"))

            let missing = try await curl(Self.flavor + ["--path-as-is", root + "/computeMetadata/v1/%3Cb%3E/../x"])
            #expect(missing.status == 404)
            #expect(missing.value(of: "Content-Type") == "text/plain; charset=utf-8")
            #expect(missing.body == "404 Not Found: /computeMetadata/v1/%3Cb%3E/../x\n")

            let post = try await curl(Self.flavor + ["-X", "POST", "-d", "x=1", root + Self.tokenPath])
            #expect(post.status == 405)
            #expect(post.value(of: "Allow") == "GET, HEAD")

            // None of them fetched a token.
            #expect(tokens.calls == 0)
        }
    }

    @Test func headAnswersGETsFieldsWithoutTheBody() async throws {
        try await MetadataServerFixture.withServer { address, _ in
            let url = "http://\(address)/computeMetadata/v1/project/project-id"
            let head = try await curl(Self.flavor + ["-I", url])
            #expect(head.status == 200)
            #expect(head.value(of: "Content-Length") == "\("fleet-test".utf8.count)")
            #expect(head.body.isEmpty)
        }
    }

    @Test func theKernelNamesTheUserAndOnlyTheRulesDecide() async throws {
        try #require(getuid() == 0, "setpriv to uid 65534 needs root")
        try await MetadataServerFixture.withServer { address, tokens in
            let base = "http://\(address)/computeMetadata/v1/instance/service-accounts/"
            // uid 65534 is not allowed the default entry.
            let refused = try await curl(Self.flavor + [base + "default/token"], asNobody: true)
            #expect(refused.status == 403)
            #expect(refused.body.contains("uid 65534 is not allowed the token of fleet-admin"))
            // Its own entry, and the one of its group.
            let own = try await curl(
                Self.flavor + [base + MetadataServerFixture.nobodyAccount + "/token"],
                asNobody: true
            )
            #expect(own.status == 200)
            #expect(own.body.contains(MetadataServerFixture.token(of: "nobody-only")))
            let group = try await curl(
                Self.flavor + [base + MetadataServerFixture.groupAccount + "/token"],
                asNobody: true
            )
            #expect(group.status == 200)
            #expect(group.body.contains(MetadataServerFixture.token(of: "nogroup")))
            // Root gets no exemption.
            let root = try await curl(Self.flavor + [base + MetadataServerFixture.nobodyAccount + "/token"])
            #expect(root.status == 403)
            #expect(root.body.contains("uid 0 is not allowed"))
            #expect(tokens.calls == 2)
            // The listing shows each only what it may have.
            let listing = try await curl(Self.flavor + [base], asNobody: true)
            #expect(listing.body == "\(MetadataServerFixture.nobodyAccount)/\n\(MetadataServerFixture.groupAccount)/\n")
        }
    }

    @Test func aFailingTokenSourceIs503() async throws {
        try await MetadataServerFixture.withServer { address, tokens in
            tokens.setFailing(true)
            let answer = try await curl(Self.flavor + ["http://\(address)" + Self.tokenPath])
            #expect(answer.status == 503)
            #expect(answer.value(of: "Metadata-Flavor") == "Google")
        }
    }

    @Test func aConnectionIsKeptAliveAcrossRequests() async throws {
        try await MetadataServerFixture.withServer { address, tokens in
            let url = "http://\(address)" + Self.tokenPath
            let outcome = try await TestProcess.run(
                ["curl", "-sS", "-v", "--noproxy", "*", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"]
                    + Self.flavor + [url, url, url],
                timeout: hangLimit
            )
            #expect(outcome.status == 0)
            let reused = outcome.standardError.split(separator: "\n").filter {
                $0.contains("Re-using existing connection") || $0.contains("Reusing existing")
            }
            #expect(reused.count == 2, "\(outcome.standardError)")
            #expect(tokens.calls == 3)
            // HTTP/1.0 without keep-alive is closed after its answer.
            let old = try await curl(Self.flavor + ["--http1.0", url])
            #expect(old.status == 200)
            #expect(old.value(of: "Connection") == "close")
        }
    }
}
