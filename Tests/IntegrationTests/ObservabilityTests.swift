import FleetTokenClient
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// METRICS, INFO, `fleet-tokend status` and the HTTP metrics listener, against the real binary and
/// the fake provider.
@Suite("Observability")
struct ObservabilityTests {
    /// A config with the fake provider for vehicle and trip (short time-outs), and a kind whose
    /// provider port refuses connections.
    @discardableResult
    /// `timeout`: the providers' time-out, wide enough by default for a loaded machine to answer
    /// a fake provider's 503 in time; the tests of the time-out itself make it short.
    private func config(
        _ provider: FakeTokenProvider,
        extra: String = "",
        to given: String? = nil,
        timeout: Double = 10
    ) throws -> String {
        let path = given ?? TestTemporary.path("ftd-obs", suffix: ".json")
        let json = """
            {"providers": {
              "vehicle": {"url": "\(provider.url(kind: "vehicle"))", "timeout": \(timeout), "connect_timeout": 2},
              "trip": {"url": "\(provider.url(kind: "trip"))", "timeout": \(timeout), "connect_timeout": 2},
              "refused": {"url": "http://127.0.0.1:1/token/{id}", "timeout": 3, "connect_timeout": 2}
            }\(extra)}
            """
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    private func withAgent(
        _ flags: [String] = [],
        extraConfig: String = "",
        timeout: Double = 10,
        _ body: (AgentProcess, FakeTokenProvider) async throws -> Void
    ) async throws {
        // The config's providers (with their time-outs) and the harness's --provider flags name
        // the same fake provider.
        try await withProviderAndAgent(
            flags,
            arguments: { ["--config", try config($0, extra: extraConfig, timeout: timeout)] },
            body
        )
    }

    private func status(_ agent: AgentProcess, _ arguments: [String] = []) async throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath] + arguments)
    }

    @Test func metricsParseWithPrometheusAndCountersMoveWithTheRun() async throws {
        try await withAgent { agent, _ in
            let before = try await prometheusParse(try await agent.metricsText())
            #expect(before.has("fleet_tokend_healthy"))
            #expect(before.has("fleet_tokend_fetch_errors_total", ["kind": "vehicle", "reason": "5xx"]))
            #expect(before.value("fleet_tokend_fetch_errors_total", ["kind": "vehicle", "reason": "5xx"]) == 0)

            // The first GET fetches; the second, sent after it is answered, is a hit.
            let first = try await agent.send("GET vehicle v-1")
            let replies = try await agent.send(
                "GET vehicle v-1",
                "GET vehicle status500-1",
                "GET vehicle retry7-1",
                "GET vehicle nonjson-1",
                "GET vehicle wrongid-1",
                "GET vehicle expired-1",
                "GET refused r-1",
                "GET vehicle hang-1",
                "GET lorry l-1"
            )
            #expect(tokenOf(first.first) != nil && first == [replies[0]])
            #expect(replies[1] == "ERR unavailable HTTP 500")
            #expect(replies[4].hasPrefix("ERR rejected"))
            #expect(replies[8].hasPrefix("ERR bad-kind"))

            let after = try await prometheusParse(try await agent.metricsText())
            #expect(after.value("fleet_tokend_cache_hits_total") - before.value("fleet_tokend_cache_hits_total") == 1)
            #expect(
                after.value("fleet_tokend_cache_misses_total") - before.value("fleet_tokend_cache_misses_total") == 8
            )
            for (kind, reason) in [
                ("vehicle", "5xx"), ("vehicle", "429"), ("vehicle", "bad_body"), ("vehicle", "claim_mismatch"),
                ("vehicle", "expired"), ("refused", "refused"), ("vehicle", "timeout"),
            ] {
                let labels = ["kind": kind, "reason": reason]
                #expect(
                    after.value("fleet_tokend_fetch_errors_total", labels)
                        - before.value("fleet_tokend_fetch_errors_total", labels) == 1,
                    "\(kind) \(reason)"
                )
            }
            #expect(after.value("fleet_tokend_requests_total", ["verb": "GET", "code": "ok"]) == 2)
            #expect(after.value("fleet_tokend_requests_total", ["verb": "GET", "code": "unavailable"]) == 6)
            #expect(after.value("fleet_tokend_requests_total", ["verb": "GET", "code": "rejected"]) == 1)
            #expect(after.value("fleet_tokend_requests_total", ["verb": "GET", "code": "bad-kind"]) == 1)
            #expect(after.value("fleet_tokend_requests_total", ["verb": "METRICS", "code": "ok"]) >= 1)
            #expect(after.value("fleet_tokend_entries", ["kind": "vehicle"]) >= 1)
            #expect(after.value("fleet_tokend_soonest_expiry_seconds", ["kind": "vehicle"]) > 3000)
            #expect(after.value("fleet_tokend_fetch_duration_seconds_count", ["kind": "vehicle"]) >= 7)
            #expect(after.value("fleet_tokend_provider_failing_seconds", ["kind": "refused"]) >= 0)
            #expect(
                after.has(
                    "fleet_tokend_provider_last_failure_timestamp_seconds",
                    ["kind": "refused", "reason": "refused"]
                )
            )
            #expect(after.value("fleet_tokend_healthy") == 1, "degraded_after is 120 s by default")
        }
    }

    @Test func metricsIsFramedByItsEOFLineWhenPipelined() async throws {
        try await withAgent { agent, _ in
            let lines = try await SocketClient.exchange(
                agent.socketPath,
                "PING\nMETRICS\nPING\nmetrics now\nMETRICS\nQUIT\n",
                halfClose: true
            )
            #expect(lines.first == "PONG")
            let ends = lines.indices.filter { lines[$0] == "# EOF" }
            #expect(ends.count == 2, "two METRICS replies, each ended by # EOF")
            guard ends.count == 2 else { return }
            #expect(lines[ends[0] + 1] == "PONG", "the reply after METRICS follows its # EOF line")
            #expect(lines[ends[0] + 2] == "ERR bad-request METRICS takes no arguments")
            #expect(ends[1] == lines.count - 1, "nothing after the last reply (QUIT gets none)")
            #expect(!lines.contains { $0.hasPrefix("OK ") }, "no token in an exposition")
        }
    }

    @Test func theClientReadsMetricsAmidPipelinedCalls() async throws {
        // The default provider time-outs: sixteen fetches at once must not time out on a busy machine.
        try await withProviderAndAgent { agent, _ in
            var configuration = FleetTokenClient.Configuration()
            configuration.sharedMemory = false
            configuration.memoization = false
            let client = FleetTokenClient(socketPath: agent.socketPath, configuration: configuration)
            // METRICS between token calls on the one pipelined connection: every reply still
            // reaches its own caller.
            let results = try await withThrowingTaskGroup(of: String.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        if index % 5 == 0 { return try await client.metrics() }
                        return try await client.token(.vehicle("cm-\(index)")).jwt
                    }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }
            }
            let expositions = results.filter { $0.hasPrefix("# ") }
            #expect(expositions.count == 4)
            #expect(expositions.allSatisfy { $0.contains("fleet_tokend_requests_total") && !$0.contains("# EOF") })
            #expect(results.count - expositions.count == 16)
            try await client.ping()
        }
    }

    @Test func theHTTPListenerServesTheSameMetrics() async throws {
        let port = try freeLoopbackPort()
        try await withAgent(["--metrics-listen", "127.0.0.1:\(port)"]) { agent, _ in
            _ = try await agent.send("GET vehicle v-1", "GET vehicle status503-1")
            var http: (status: String, body: String) = ("", "")
            for _ in 0..<100 {
                if let reply = try? await httpGet(port: port, path: "/metrics") {
                    http = reply
                    break
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(http.status == "HTTP/1.0 200 OK")
            let overHTTP = try await prometheusParse(http.body)
            let overSocket = try await prometheusParse(try await agent.metricsText())
            func series(_ samples: [ParsedSample]) -> Set<String> {
                Set(samples.map { "\($0.name)\($0.labels.sorted { $0.key < $1.key })" })
            }
            #expect(!overHTTP.isEmpty)
            #expect(series(overHTTP).subtracting(series(overSocket)).isEmpty, "the same series")
            #expect(series(overSocket).subtracting(series(overHTTP)).allSatisfy { $0.contains("METRICS") })
            #expect(overHTTP.value("fleet_tokend_fetch_errors_total", ["kind": "vehicle", "reason": "5xx"]) == 1)
            #expect(!http.body.contains("# EOF"), "the socket's framing line is not part of the HTTP body")
            let missing = try await httpGet(port: port, path: "/nothing")
            #expect(missing.status == "HTTP/1.0 404 Not Found")
        }
    }

    @Test func infoAndStatusNeverShowAToken() async throws {
        try await withAgent { agent, provider in
            let ids = ["v-1", "v-2", "v-3"]
            for id in ids {
                _ = try await agent.send("GET vehicle \(id)")
                _ = try await agent.send("GET vehicle \(id)", "GET vehicle \(id)")
            }
            _ = try await agent.send("GET trip t-1", "REFRESH trip t-1", "GET vehicle status503-9")
            let socat = try #require(which("socat"))
            let info = try await run(
                socat,
                ["-t", "5", "-", "UNIX-CONNECT:\(agent.socketPath)"],
                stdin: (ids.map { "INFO vehicle \($0)" } + [
                    "INFO trip t-1", "INFO vehicle status503-9", "INFO vehicle nobody",
                ])
                .map { $0 + "\n" }.joined()
            )
            let lines = info.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 6, "\(lines)")
            let served = try await agent.send("GET vehicle v-1")
            let token = try #require(tokenOf(served.first))
            let sha = try await run("/usr/bin/sha256sum", [], stdin: token)
            let fingerprint = String(sha.stdout.prefix(12))
            #expect(lines.first?.contains("fingerprint=\(fingerprint)") == true, "\(lines.first ?? "")")
            #expect(lines.first?.contains(" reads=2 ") == true, "two GETs since the fetch")
            #expect(lines[4].contains("token=no") && lines[4].hasSuffix("last_error=provider failed: HTTP 503"))
            #expect(lines[4].contains("last_error_reason=5xx"))
            #expect(lines[5] == "OK cached=no")

            let text = try await status(agent)
            let json = try await status(agent, ["--json"])
            #expect(text.status == 0, "\(text.stdout)\(text.stderr)")
            #expect(text.stdout.contains("serving"))
            #expect(!text.stdout.contains("\u{1B}["), "no colour when stdout is not a terminal")
            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            )
            #expect(object["state"] as? String == "serving")
            let tokens = provider.issuedTokens
            #expect(tokens.count >= 4)
            let metrics = try await agent.metricsText()
            for output in [info.stdout, text.stdout, json.stdout, metrics] {
                for token in tokens {
                    #expect(!output.contains(token), "a token was shown")
                    // The payload part alone would identify it too.
                    #expect(!output.contains(token.split(separator: ".")[1]))
                }
            }
        }
    }

    @Test func statusExitCodesForHealthyDegradedAndUnreachable() async throws {
        try await withAgent(["--degraded-after", "0"]) { agent, provider in
            let healthy = try await status(agent)
            #expect(healthy.status == 0, "\(healthy.stdout)\(healthy.stderr)")
            provider.setDown(true)
            #expect(try await agent.send("GET vehicle d-1") == ["ERR unavailable HTTP 503"])
            let degraded = try await status(agent)
            #expect(degraded.status == 1, "\(degraded.stdout)")
            #expect(degraded.stdout.contains("degraded"))
            #expect(degraded.stdout.contains("vehicle: provider failing"))
            #expect(degraded.stdout.contains("last error: 5xx"))
            let json = try await status(agent, ["--json"])
            #expect(json.status == 1)
            #expect(json.stdout.contains(#""state":"degraded""#))
            // The kind is named in systemd's STATUS line too (the same summary).
            let metrics = try await prometheusParse(try await agent.metricsText())
            #expect(metrics.value("fleet_tokend_degraded", ["kind": "vehicle", "reason": "provider_failing"]) == 1)
            #expect(metrics.value("fleet_tokend_degraded", ["kind": "trip", "reason": "provider_failing"]) == 0)
            #expect(metrics.value("fleet_tokend_healthy") == 0)
            // A success ends the failing run.
            provider.setDown(false)
            _ = try await agent.send("GET vehicle d-2")
            #expect(try await status(agent).status == 0)
        }
        let nowhere = try await run(
            AgentProcess.binary,
            ["status", "--socket", TestTemporary.path("ftd-none", suffix: ".sock")]
        )
        #expect(nowhere.status == 69)
        #expect(nowhere.stderr.contains("agent unreachable"))
    }

    /// A provider that sends its head and then drips its body (one byte every 500 ms, the whole
    /// body in minutes) fails at the kind's 3 s time-out, and that failure counts for health,
    /// status and metrics as a refused connection does: never "serving" while every fetch hangs.
    @Test func aDrippingProviderIsATimeoutForHealthStatusAndMetrics() async throws {
        try await withAgent(["--degraded-after", "0"], timeout: 3) { agent, _ in
            let healthy = try await status(agent)
            #expect(healthy.status == 0, "\(healthy.stdout)\(healthy.stderr)")
            let started = Date()
            let reply = try await agent.send("GET vehicle drip-1").first ?? ""
            // The body's deadline on a quiet machine; on a loaded one the head may be late too,
            // and then the head's deadline ends it (either way, at the 3 s time-out).
            #expect(
                reply == "ERR unavailable reading the reply timed out after 3 s (the body did not end in time)"
                    || reply == "ERR unavailable request failed: Deadline exceeded",
                "\(reply)"
            )
            // The drip would take minutes; the reply names the time-out.
            #expect(Date().timeIntervalSince(started) < 60, "ended by the time-out, not by the drip")
            let degraded = try await status(agent)
            #expect(degraded.status == 1, "\(degraded.stdout)")
            #expect(degraded.stdout.contains("vehicle: provider failing"), "\(degraded.stdout)")
            #expect(degraded.stdout.contains("last error: timeout"), "\(degraded.stdout)")
            let metrics = try await prometheusParse(try await agent.metricsText())
            #expect(metrics.value("fleet_tokend_fetch_errors_total", ["kind": "vehicle", "reason": "timeout"]) == 1)
            #expect(metrics.value("fleet_tokend_degraded", ["kind": "vehicle", "reason": "provider_failing"]) == 1)
            #expect(metrics.value("fleet_tokend_healthy") == 0)
            #expect(agent.log.contains("reading the reply timed out") || agent.log.contains("Deadline exceeded"))
        }
    }

    @Test func logLevelIsAppliedOnReload() async throws {
        let provider = try await FakeTokenProvider.start()
        let path = try config(provider)
        let agent = try await AgentProcess(["--config", path])
        defer { Task { await provider.stop() } }
        _ = try await agent.send("GET vehicle before-1")
        #expect(!agent.log.contains("fetched token"), "debug lines are off at info")
        try config(provider, extra: #", "log_level": "debug""#, to: path)
        kill(agent.pid, SIGHUP)
        for _ in 0..<200 where (try await agent.stats())["reloads"] != 1 {
            try await Task.sleep(for: .milliseconds(25))
        }
        #expect(try await agent.stats()["reloads"] == 1)
        _ = try await agent.send("GET vehicle after-1")
        #expect(agent.log.contains("fetched token"), "debug lines appear after the reload:\n\(agent.log)")
        await agent.stop()
    }
}

/// Denied peers in the metrics, and `status` for a user who is not an admin.
@Suite("Observability with real users", .enabled(if: TestUsers.available, "needs root, useradd, runuser and socat"))
struct ObservabilityPeerTests {
    @Test func aDeniedPeerRaisesDeniedAndStatusSaysDenied() async throws {
        try await TestUsers.ensure()
        let config = TestTemporary.path("ftd-obs-rules", suffix: ".json")
        try
            #"{"allow": {"vehicle": {"users": ["\#(TestUsers.allowed)"]}}, "admin": {"users": ["\#(TestUsers.allowed)"]}}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        try await withProviderAndAgent(["--config", config, "--socket-mode", "0666"]) { agent, _ in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            let before = try await prometheusParse(try await agent.metricsText())
            let other = try await TestUsers.socat(
                as: TestUsers.other,
                socket: agent.socketPath,
                "GET vehicle p-1",
                "METRICS",
                "INFO vehicle p-1",
                "GET trip p-1"
            )
            #expect(other.count == 4, "\(other)")
            #expect(other.first == "ERR denied not allowed to ask for kind vehicle")
            #expect(other.dropFirst().first == "ERR denied METRICS is for the agent's admins")
            #expect(other.dropFirst(2).first == "ERR denied INFO is for the agent's admins")
            #expect(tokenOf(other.last) != nil, "trip has no rules: open")
            let admin = try await TestUsers.socat(as: TestUsers.allowed, socket: agent.socketPath, "METRICS")
            #expect(admin.last == "# EOF", "an admin reads the metrics")
            let after = try await prometheusParse(try await agent.metricsText())
            #expect(
                after.value("fleet_tokend_denied_total", ["kind": "vehicle"])
                    - before.value("fleet_tokend_denied_total", ["kind": "vehicle"]) == 1
            )
            #expect(
                after.value("fleet_tokend_denied_total", ["kind": "admin"])
                    - before.value("fleet_tokend_denied_total", ["kind": "admin"]) == 2
            )
            #expect(after.value("fleet_tokend_requests_total", ["verb": "METRICS", "code": "denied"]) == 1)
            let status = try await run(
                which("runuser")!,
                ["-u", TestUsers.other, "--", AgentProcess.binary, "status", "--socket", agent.socketPath]
            )
            #expect(status.status == 77, "\(status.stdout)\(status.stderr)")
            #expect(status.stderr.contains("denied"))
        }
    }
}
