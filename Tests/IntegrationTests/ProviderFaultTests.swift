import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Every provider fault of docs/RELIABILITY.md's table, against the fake provider (or a loopback
/// port that refuses or never accepts): what the client gets and what the agent logs.
@Suite("Provider faults")
struct ProviderFaultTests {
    /// A config with the fake provider for vehicle (time-outs a loaded machine never reaches) and,
    /// with a 2.5 s time-out, for `slow`; a port that refuses for `refused`; and a listener whose
    /// queue is full (connects hang) for `blackhole`.
    private func config(provider: FakeTokenProvider, blackholePort: Int) throws -> String {
        let path = TestTemporary.path("ftd-config", suffix: ".json")
        let json = """
            {"providers": {
              "vehicle": {"url": "\(provider.url(kind: "vehicle"))", "timeout": 30, "connect_timeout": 10},
              "slow": {"url": "\(provider.url(kind: "slow"))", "timeout": 2.5, "connect_timeout": 10},
              "refused": {"url": "http://127.0.0.1:1/token/{id}", "timeout": 1, "connect_timeout": 0.5},
              "blackhole": {"url": "http://127.0.0.1:\(blackholePort)/token/{id}", "timeout": 5, "connect_timeout": 0.5}
            }}
            """
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    private func withFaultyAgent(_ body: (AgentProcess, FakeTokenProvider) async throws -> Void) async throws {
        let blackhole = try FullListener()
        defer { blackhole.close() }
        try await withProviderAndAgent(
            arguments: { ["--config", try config(provider: $0, blackholePort: blackhole.port)] },
            body
        )
    }

    @Test func eachFaultGetsItsReplyAndItsLogLine() async throws {
        try await withFaultyAgent { agent, provider in
            let cases: [(request: String, reply: String, log: String)] = [
                ("GET refused r-1", "ERR unavailable request failed: Connection refused", "Connection refused"),
                ("GET blackhole b-1", "ERR unavailable request failed: Connect timeout", "Connect timeout"),
                ("GET slow hang-1", "ERR unavailable request failed: Deadline exceeded", "Deadline exceeded"),
                (
                    "GET slow drip-1", "ERR unavailable reading the reply timed out after 2.5 s",
                    "reading the reply timed out after 2.5 s"
                ),
                ("GET vehicle status500-1", "ERR unavailable HTTP 500", "HTTP 500"),
                ("GET vehicle status503-1", "ERR unavailable HTTP 503", "HTTP 503"),
                ("GET vehicle retry7-1", "ERR unavailable HTTP 429; retry after 7 s", "retry after 7 s"),
                ("GET vehicle retrydate-1", "ERR unavailable HTTP 503; retry after ", "HTTP 503, retry after "),
                ("GET vehicle redirect-1", "ERR unavailable HTTP 302 redirect, not followed", "redirect, not followed"),
                ("GET vehicle truncated-1", "ERR unavailable reading the reply failed", "reading the reply failed"),
                ("GET vehicle nonjson-1", "ERR unavailable reply is not valid JSON", "not valid JSON"),
                ("GET vehicle twice-1", "ERR unavailable reply gives field token twice", "gives field token twice"),
                ("GET vehicle huge-1", "ERR unavailable reply body over 64 KiB", "over 64 KiB"),
                ("GET vehicle expired-1", "ERR unavailable token is already expired", "already expired"),
                ("GET vehicle wrongid-1", "ERR rejected token's vehicleid claim names another id", "names another id"),
            ]
            for (request, expected, log) in cases {
                let started = Date()
                let reply = try await agent.send(request).first ?? ""
                #expect(reply.hasPrefix(expected), "\(request): \(reply)")
                // The faults that wait for a time-out wait 5 s at most (blackhole), and the reply
                // names the fault: this only catches a hang.
                #expect(Date().timeIntervalSince(started) < 60, "\(request) is bounded by its time-outs")
                #expect(agent.log.contains(log), "\(request): the log names the fault")
            }
            #expect(agent.log.components(separatedBy: "token fetch failed").count - 1 >= cases.count)
            #expect(try await agent.send("PING") == ["PONG"], "the agent goes on")
            #expect(tokenOf(try await agent.send("GET vehicle fine-1").first) != nil)
            _ = provider
        }
    }

    /// A provider host that does not resolve is named as such, with the resolver's reason, in the
    /// reply, the log, `status` and the metric's reason (`dns`), not as a refused connection. The
    /// agent runs in a network namespace of its own (root only), where the resolver cannot reach
    /// any name server: a real resolver failure, and no query leaves the machine.
    @Test(.enabled(if: geteuid() == 0, "a network namespace needs root"))
    func aProviderHostThatDoesNotResolveIsNamed() async throws {
        let config = TestTemporary.path("ftd-dns", suffix: ".json")
        defer { unlink(config) }
        try #"{"providers": {"vehicle": {"url": "http://tokens.invalid/token/{id}", "timeout": 5}}}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        let agent = try await AgentProcess(
            ["--config", config],
            launcher: ["/usr/bin/unshare", "--net", "--"]
        )
        let reply = try await agent.send("GET vehicle v-1").first ?? ""
        #expect(reply.hasPrefix("ERR unavailable request failed: cannot resolve host tokens.invalid: "), "\(reply)")
        #expect(!reply.contains("NIOConnectionError"))
        #expect(agent.log.contains("cannot resolve host tokens.invalid"))
        let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(status.stdout.contains("last error dns "), "\(status.stdout)")
        let info = try await agent.send("INFO vehicle v-1").first ?? ""
        #expect(info.contains("last_error_reason=dns"), "\(info)")
        await agent.stop()
    }

    @Test func retryAfterHoldsOffFetchesForThatLong() async throws {
        try await withFaultyAgent { agent, provider in
            #expect(try await agent.send("GET vehicle retry120-1").first?.hasPrefix("ERR unavailable HTTP 429") == true)
            let again = try await agent.send("GET vehicle retry120-1").first ?? ""
            let wait = Int(again.split(separator: " ").dropLast().last ?? "") ?? 0
            #expect(again.hasPrefix("ERR unavailable provider failing; next try in"), "\(again)")
            // Counting down from the provider's 120 s (seconds pass on a loaded machine), far
            // above the agent's own first back-off.
            #expect((90...120).contains(wait), "the provider's Retry-After is the back-off floor: \(again)")
            #expect(provider.requests(for: "retry120-1") == 1, "no fetch while it holds")
            #expect(try await agent.send("GET vehicle retry100000-1").first?.hasPrefix("ERR unavailable") == true)
            let capped = try await agent.send("GET vehicle retry100000-1").first ?? ""
            let cappedWait = Int(capped.split(separator: " ").dropLast().last ?? "") ?? 0
            #expect((270...300).contains(cappedWait), "capped at 300 s: \(capped)")
        }
    }

    @Test func aRedirectToAnotherHostIsNotFollowed() async throws {
        let elsewhere = try await FakeTokenProvider.start(host: "127.0.0.2")
        defer { Task { await elsewhere.stop() } }
        try await withFaultyAgent { agent, provider in
            provider.setRedirectTarget("http://127.0.0.2:\(elsewhere.port)/token/vehicle/redirect-1")
            let reply = try await agent.send("GET vehicle redirect-1").first ?? ""
            #expect(reply.hasPrefix("ERR unavailable HTTP 302"), "\(reply)")
            #expect(elsewhere.totalRequests == 0, "the other host never saw a request")
        }
    }

    @Test func aProviderClockOffByMoreThanAMinuteIsReportedAndFutureTokensStillServe() async throws {
        try await withFaultyAgent { agent, provider in
            provider.setDateSkew(seconds: 400)
            let token = try #require(tokenOf(try await agent.send("GET vehicle futureiat-1").first))
            #expect(provider.issuedTokens.contains(token), "a token issued in our future is still used")
            _ = try await agent.send("GET vehicle futureiat-2")
            let stats = try await agent.stats()
            #expect((398...402).contains(stats["provider_clock_skew_s"] ?? 0), "\(stats)")
            let log = agent.log
            #expect(log.components(separatedBy: "provider clock differs from ours").count == 2, "warned once")
            #expect(log.components(separatedBy: "provider issues tokens dated in the future").count == 2, "once")
            #expect(!log.contains(token), "never the token")
            provider.setDateSkew(seconds: 0)
            _ = try await agent.send("GET vehicle fine-2")
            #expect(abs(try await agent.stats()["provider_clock_skew_s"] ?? 99) <= 2)
        }
    }
}

/// A loopback TCP listener that never accepts and whose queue is full: connects to it hang
/// until the client's connect time-out.
final class FullListener: @unchecked Sendable {
    let port: Int
    private var descriptors: [Int32] = []

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw AgentError("socket failed") }
        descriptors.append(listener)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
        }
        guard bound == 0, listen(listener, 0) == 0 else { throw AgentError("bind or listen failed") }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        // Fill the accept queue: with it full, the kernel drops further connection attempts.
        for _ in 0..<4 {
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            descriptors.append(client)
        }
        usleep(100_000)
    }

    func close() {
        for descriptor in descriptors { _ = Glibc.close(descriptor) }
        descriptors = []
    }
}
