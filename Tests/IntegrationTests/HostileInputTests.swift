import FleetTokenClient
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Hostile provider replies and hostile ids against the real agent, a real HTTP provider on
/// loopback, socat, the client library and the CLI: every request gets an answer, the agent stays
/// up, no reserved id reaches a provider, and no ambiguous or wildcard token reaches a caller.
@Suite("Hostile input")
struct HostileInputTests {
    /// An unsigned JWT whose payload is exactly `payload` (so it can hold what JSONSerialization
    /// will not write: `1e400`, duplicate keys).
    static func rawJWT(_ payload: String) -> String {
        func b64(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return b64(#"{"alg":"RS256","typ":"JWT"}"#) + "." + b64(payload) + ".c2lnbmF0dXJl"
    }

    /// The replies to script: an id each, with status 200, its headers and its body.
    static func hostileReplies(now: Int) -> [(id: String, headers: [(String, String)], body: String)] {
        let json = [("Content-Type", "application/json")]
        let plain = [("Content-Type", "text/plain")]
        let fitting = #""authorization":{"vehicleid":"ID"}"#
        func jwt(_ id: String, exp: String, iat: String = "\(now)") -> String {
            rawJWT(#"{"iat":\#(iat),"exp":\#(exp),\#(fitting.replacingOccurrences(of: "ID", with: id))}"#)
        }
        var replies: [(String, [(String, String)], String)] = []
        var serial = 0
        func add(_ headers: [(String, String)], _ body: (String) -> String) {
            serial += 1
            let id = "hostile-\(serial)"
            replies.append((id, headers, body(id)))
        }
        let numbers = [
            "0", "-1", "0.5", "1e300", "-1e300", "1e400", "18446744073709551615", "9223372036854775808",
            "253402300799", "\(now)000", "\(now)000000", "\(now)000000000", "\(now + 600).75",
        ]
        for value in numbers {
            for field in ["expiration", "expires_at", "expirationTimestamp", "expiration_timestamp_ms", "expires_in"] {
                add(json) { #"{"token":"opaque-\#($0)","\#(field)":\#(value)}"# }
            }
            add(json) { #"{"token":"\#(jwt($0, exp: value))"}"# }
            let soon = "\(now + 600)"
            add(json) { #"{"token":"\#(jwt($0, exp: soon, iat: value))"}"# }
        }
        for text in ["nan", "inf", "-inf", "1e400", "9999-12-31T23:59:59Z", "+275760-09-13T00:00:00Z", ""] {
            add(json) { #"{"token":"opaque-\#($0)","expiration":"\#(text)"}"# }
            add(json) { #"{"token":"opaque-\#($0)","expires_in":"\#(text)"}"# }
        }
        for maxAge in ["inf", "1e300", "99999999999999999999999", "-5", "nan"] {
            add(plain + [("Cache-Control", "max-age=\(maxAge)")]) { "opaque-\($0)" }
            add(plain + [("Cache-Control", "max-age=\(maxAge)")]) { jwt($0, exp: "1e300") }
        }
        for expires in [
            "Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "Thu, 01 Jan 1970 00:00:00 GMT",
        ] {
            add(plain + [("Expires", expires)]) { "opaque-\($0)" }
            add(plain + [("Expires", expires)]) { jwt($0, exp: "\(now)000") }
        }
        add(plain + [("Date", "Fri, 31 Dec 9999 23:59:59 GMT")]) { jwt($0, exp: "\(now + 600)") }
        add(json) { _ in String(repeating: "[", count: 60_000) }
        add(json) { _ in #"{"token":"\#(String(repeating: "[", count: 1000))"}"# }
        return replies.map { (id: $0.0, headers: $0.1, body: $0.2) }
    }

    @Test(arguments: [true, false])
    func everyHostileReplyGetsAnAnswerAndTheAgentStaysUp(sharedMemory: Bool) async throws {
        let now = Int(Date().timeIntervalSince1970)
        let replies = Self.hostileReplies(now: now)
        try await withProviderAndAgent(
            [sharedMemory ? "--shared-memory" : "--no-shared-memory"],
            configure: { provider in
                for reply in replies { provider.script(reply.id, headers: reply.headers, body: Array(reply.body.utf8)) }
            }
        ) { agent, provider in
            let answers = try await SocketClient.exchange(
                agent.socketPath,
                replies.map { "GET vehicle \($0.id)\n" }.joined(),
                lines: replies.count
            )
            #expect(answers.count == replies.count, "every request is answered")
            // Far expiries are capped a day from the fetch, which a loaded run may make minutes
            // after `now`: the bound counts from now, after the answers.
            let answered = Int(Date().timeIntervalSince1970)
            var served = 0
            for (reply, answer) in zip(replies, answers) {
                let fields = answer.split(separator: " ")
                if fields.first == "OK" {
                    served += 1
                    let expiresAt = Int(fields.last ?? "") ?? 0
                    #expect(
                        expiresAt > now && expiresAt <= answered + 86_400 + 60,
                        "\(reply.body.prefix(120)): \(answer)"
                    )
                } else {
                    #expect(answer.hasPrefix("ERR unavailable ") || answer.hasPrefix("ERR rejected "), "\(answer)")
                }
            }
            #expect(served > 10, "far expiries are bounded and served, not refused")
            #expect(provider.requests(for: replies[0].id) == 1)
            #expect(try await agent.send("PING") == ["PONG"], "the agent is still up")
            #expect(tokenOf(try await agent.send("GET vehicle fine-1").first) != nil, "and still serves")
            #expect(!agent.log.contains("Fatal error"), "no trap")
        }
    }

    @Test func idsWithAMeaningOfTheirOwnAreRefusedEverywhereAndNeverReachTheProvider() async throws {
        try await withProviderAndAgent { agent, provider in
            let socat = try #require(which("socat"), "socat must be installed (scripts/test installs it)")
            let lines = [
                "GET vehicle *", "GET vehicle ..", "GET vehicle .", "GET trip * 600", "REFRESH vehicle *",
                "REFRESH vehicle .. tok", "DROP vehicle *", "INFO vehicle ..", "TOUCH vehicle v-1 *", "PING",
            ]
            let viaSocat = try await run(
                "/bin/sh",
                ["-c", "printf '\(lines.joined(separator: "\\n"))\\n' | \(socat) - UNIX-CONNECT:\(agent.socketPath)"]
            )
            let answers = viaSocat.stdout.split(separator: "\n").map(String.init)
            #expect(answers.count == lines.count, "\(viaSocat)")
            for (line, answer) in zip(lines.dropLast(), answers) {
                #expect(answer.hasPrefix("ERR bad-id id "), "\(line): \(answer)")
            }
            #expect(answers.last == "PONG")

            let client = FleetTokenClient(socketPath: agent.socketPath)
            for id in ["*", ".", ".."] {
                let reason = id == "*" ? "id * is a wildcard" : "id \(id) is a dot segment"
                do {
                    let token = try await client.token(.vehicle(id))
                    Issue.record("the client got a token for \(id): \(token.expiresAt)")
                } catch let error as FleetTokenError {
                    #expect(error == .badRequest("bad-id: \(reason)"), "\(error)")
                }
                let cli = try await run(AgentProcess.binary, ["get", "vehicle", id, "--socket", agent.socketPath])
                #expect(cli.status == 65, "fleet-tokend get vehicle \(id): \(cli)")
                #expect(cli.stdout.isEmpty)
            }
            #expect(provider.totalRequests == 0, "the provider was asked for nothing: \(provider.paths)")
            #expect(provider.paths.isEmpty)
        }
    }

    @Test func theClientAndTheCLIRefuseThemWithoutAskingTheAgent() async throws {
        let directory = try AgentProcess.makeTemporaryDirectory()
        let nowhere = directory.appendingPathComponent("none.sock").path
        let client = FleetTokenClient(socketPath: nowhere)
        for id in ["*", ".", ".."] {
            let reason = id == "*" ? "id * is a wildcard" : "id \(id) is a dot segment"
            for call in 0..<3 {
                do {
                    switch call {
                    case 0: _ = try await client.token(.vehicle(id))
                    case 1: _ = try await client.refresh(.trip(id))
                    default: try await client.drop(.vehicle(id))
                    }
                    Issue.record("call \(call) for \(id) did not fail")
                } catch {
                    #expect(error == .badRequest("bad-id: \(reason)"), "call \(call) for \(id): not 'unavailable'")
                }
            }
            let cli = try await run(AgentProcess.binary, ["get", "vehicle", id, "--socket", nowhere])
            #expect(cli.status == 65, "bad input (65), not agent unreachable (69): \(cli)")
        }
    }

    @Test func theDemoIssuerSignsNoWildcardToken() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { Task { await agent.stop() } }
        let replies = try await agent.send("GET vehicle *", "GET trip *", "GET vehicle v-1")
        #expect(replies[0] == "ERR bad-id id * is a wildcard")
        #expect(replies[1] == "ERR bad-id id * is a wildcard")
        let token = try #require(tokenOf(replies[2]))
        let claims = try #require(jwtPart(token, 1)?["authorization"] as? [String: String])
        #expect(claims == ["vehicleid": "v-1"])
        await agent.stop()
    }

    /// The issue's ambiguous claims, and the wildcard, each as a provider's reply for `GET vehicle <id>`.
    static let ambiguousAuthorizations = [
        #"{"vehicleid":"other","vehicleid":"ID"}"#, #"{"vehicleid":"other","VehicleId":"ID"}"#,
        #"{"VehicleId":"ID","vehicleid":"other"}"#, #"{"vehicleid":["other"]}"#, #"{"vehicleid":"ID","tripid":"*"}"#,
        #"{"tripid":"*"}"#, #"{"vehicleid":"*"}"#, #""vehicleid=other""#, #""vehicleid=ID""#, #"{"tripid":"t-1"}"#,
    ]

    @Test func ambiguousOrWildcardClaimsNeverReachACaller() async throws {
        let now = Int(Date().timeIntervalSince1970)
        let cases = Self.ambiguousAuthorizations.enumerated().map { index, authorization in
            let id = "claims-\(index)"
            let token = Self.rawJWT(
                #"{"exp":\#(now + 3600),"authorization":\#(authorization.replacingOccurrences(of: "ID", with: id))}"#
            )
            return (id: id, token: token)
        }
        try await withProviderAndAgent(configure: { provider in
            for (id, token) in cases {
                provider.script(
                    id,
                    headers: [("Content-Type", "application/json")],
                    body: Array(#"{"token":"\#(token)"}"#.utf8)
                )
            }
        }) { agent, _ in
            let client = FleetTokenClient(socketPath: agent.socketPath)
            for (id, token) in cases {
                let reply = try await agent.send("GET vehicle \(id)").first ?? ""
                #expect(reply.hasPrefix("ERR rejected token's "), "\(id): \(reply)")
                #expect(reply.contains(try await fingerprint(token)), "the refusal names the token by fingerprint")
                #expect(!reply.contains(token))
                let refreshed = try await agent.send("REFRESH vehicle \(id)").first ?? ""
                #expect(refreshed.hasPrefix("ERR rejected"), "\(id): \(refreshed)")
                do {
                    _ = try await client.token(.vehicle(id))
                    Issue.record("the client got the token of \(id)")
                } catch let error as FleetTokenError {
                    guard case .rejected = error else {
                        Issue.record("\(id): \(error)")
                        continue
                    }
                }
            }
            let log = agent.log
            for (_, token) in cases {
                #expect(!log.contains(token), "the token never reaches the log")
                #expect(log.contains(try await fingerprint(token)), "its fingerprint does")
            }
            #expect(
                log.contains("token_kind=vehicle") || log.contains("\"token_kind\":\"vehicle\""),
                "the kind is logged"
            )
        }
    }

    @Test func acceptWildcardServesWildcardTokensAndWarnsAtStartAndReload() async throws {
        let now = Int(Date().timeIntervalSince1970)
        let wildcard = Self.rawJWT(#"{"exp":\#(now + 3600),"authorization":{"vehicleid":"*"}}"#)
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        provider.script("w-1", headers: [("Content-Type", "text/plain")], body: Array(wildcard.utf8))
        provider.script("w-2", headers: [("Content-Type", "text/plain")], body: Array(wildcard.utf8))
        let config = TestTemporary.path("ftd-wildcard", suffix: ".json")
        func write(acceptWildcard: Bool) throws {
            let json = """
                {"providers": {"vehicle": {"url": "\(provider.url(kind: "vehicle"))", "accept_wildcard": \(acceptWildcard)}}}
                """
            try json.write(toFile: config, atomically: true, encoding: .utf8)
        }
        try write(acceptWildcard: true)
        let agent = try await AgentProcess(["--config", config])
        defer { Task { await agent.stop() } }
        let warning = "kind accepts wildcard tokens (accept_wildcard)"
        #expect(agent.log.components(separatedBy: warning).count - 1 == 1, "warned at start")
        #expect(tokenOf(try await agent.send("GET vehicle w-1").first) == wildcard)

        kill(agent.pid, SIGHUP)
        #expect(await waitForLog(agent, "configuration reloaded", count: 1))
        #expect(agent.log.components(separatedBy: warning).count - 1 == 2, "warned again at the reload")

        try write(acceptWildcard: false)
        kill(agent.pid, SIGHUP)
        #expect(await waitForLog(agent, "configuration reloaded", count: 2))
        #expect(agent.log.components(separatedBy: warning).count - 1 == 2, "no warning once it is off")
        #expect(try await agent.send("GET vehicle w-2").first?.hasPrefix("ERR rejected") == true, "refused again")
        await agent.stop()
    }

    private func waitForLog(_ agent: AgentProcess, _ text: String, count: Int) async -> Bool {
        for _ in 0..<200 {
            if agent.log.components(separatedBy: text).count - 1 >= count { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }
}

/// The agent's fingerprint of a token: the first 12 hex digits of its SHA-256 (as
/// `TokenFingerprint` in TokenAgent computes it), made with openssl so the test does not share
/// the agent's code.
private func fingerprint(_ token: String) async throws -> String {
    let digest = try await run("/bin/sh", ["-c", "printf '%s' \"$0\" | openssl dgst -sha256 -r", token])
    return String(digest.stdout.prefix(12))
}
