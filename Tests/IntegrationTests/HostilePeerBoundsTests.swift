import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The agent's memory stays bounded whatever a peer does with its connection: half-closed and
/// never reading, pipelining without reading, or just sitting there.
@Suite("Bounded under hostile peers")
struct HostilePeerBoundsTests {
    /// The resident memory of process `pid`, bytes.
    static func residentBytes(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return kilobytes * 1024
        }
        return 0
    }

    @Test(arguments: ["METRICS", "HELP", "GET vehicle v-1"])
    func halfClosedClientsThatNeverReadCannotGrowTheAgent(verb: String) async throws {
        try await withProviderAndAgent(["--stall-timeout", "2"]) { agent, _ in
            #expect(try await agent.send("GET vehicle v-1").first?.hasPrefix("OK ") == true)
            let before = Self.residentBytes(agent.pid)
            let chunk = Array(String(repeating: verb + "\n", count: 4096).utf8)
            var hostiles: [RawSocket] = []
            for _ in 0..<8 {
                let hostile = try RawSocket(path: agent.socketPath)
                _ = try await hostile.writeUntilBlocked(chunk, rounds: 5)
                hostile.shutdownWrite()
                hostiles.append(hostile)
            }
            // The stuck connections are closed once they have made no progress for the stall
            // time-out; meanwhile, the agent's memory is sampled.
            var peak = before
            // (A STATS may be slow on a loaded machine: one that times out is asked again.)
            let deadline = Date().addingTimeInterval(60)
            var open = Int.max
            while Date() < deadline {
                peak = max(peak, Self.residentBytes(agent.pid))
                open = (try? await agent.stats())?["connections"] ?? Int.max
                if open <= 1 { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(open <= 1, "the stuck connections were closed")
            let grown = peak - before
            #expect(grown < 40 << 20, "8 hostile connections grew the agent by \(grown >> 20) MiB")
            #expect(try await agent.send("PING") == ["PONG"])
            for hostile in hostiles { hostile.close() }
        }
    }

    /// A non-blocking TCP connection to 127.0.0.1:`port`; -1 when it cannot connect.
    static func connectNonBlocking(port: Int) -> Int32 {
        let fd = connectLoopback(port: port)
        if fd >= 0 { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return fd
    }

    /// Whether the peer closed `fd` within `milliseconds` (end of input or a reset).
    static func closedByPeer(_ fd: Int32, within milliseconds: Int32) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(Double(milliseconds) / 1000)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) >= 0 else { return false }
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count == 0 || (count < 0 && errno != EAGAIN) { return true }
        }
        return false
    }

    @Test func aScraperPipeliningWithoutReadingCannotGrowTheAgent() async throws {
        let port = try freeLoopbackPort()
        try await withProviderAndAgent(["--metrics-listen", "127.0.0.1:\(port)"]) { agent, _ in
            var scrape: (status: String, body: String)?
            for _ in 0..<100 where scrape == nil {
                scrape = try? await httpGet(port: port, path: "/metrics")
                if scrape == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(scrape?.status.hasSuffix("200 OK") == true)
            let before = Self.residentBytes(agent.pid)
            let request = Array(String(repeating: "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", count: 1000).utf8)
            let closed = try await offPool { () -> Int in
                var closed = 0
                for _ in 0..<4 {
                    let fd = Self.connectNonBlocking(port: port)
                    guard fd >= 0 else { continue }
                    defer { close(fd) }
                    // Write until the agent stops taking more (or closes), reading nothing.
                    var blocked = 0
                    while blocked < 20 {
                        let written = request.withUnsafeBytes {
                            send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                        }
                        if written < 0 && errno != EAGAIN { break }
                        if written <= 0 {
                            blocked += 1
                            usleep(20_000)
                        }
                    }
                    if Self.closedByPeer(fd, within: 5000) { closed += 1 }
                }
                return closed
            }
            #expect(closed == 4, "each pipelining scraper was cut off after its one request")
            let grown = Self.residentBytes(agent.pid) - before
            #expect(grown < 20 << 20, "pipelined scrapes grew the agent by \(grown >> 20) MiB")
            #expect(try await agent.send("GET vehicle v-1").first?.hasPrefix("OK ") == true)
        }
    }

    @Test func idleScrapeConnectionsAreCappedAndTimedOut() async throws {
        let port = try freeLoopbackPort()
        try await withProviderAndAgent(["--metrics-listen", "127.0.0.1:\(port)"]) { agent, _ in
            var up = false
            for _ in 0..<100 where !up {
                up = (try? await httpGet(port: port, path: "/metrics")) != nil
                if !up { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(up)
            let connections = try await offPool { (0..<64).map { _ in Self.connectNonBlocking(port: port) } }
            defer { for fd in connections where fd >= 0 { close(fd) } }
            #expect(connections.allSatisfy { $0 >= 0 })
            // Past the cap (16), connections are closed as soon as they are accepted.
            let refused = try await offPool {
                connections.dropFirst(16).filter { Self.closedByPeer($0, within: 3000) }.count
            }
            #expect(refused == 48, "\(refused) of the 48 over the cap were closed at once")
            #expect(try await agent.send("GET vehicle v-1").first?.hasPrefix("OK ") == true)
            // The idle ones are closed after the idle time-out (10 s), and scrapes work again.
            let timedOut = try await offPool {
                connections.prefix(16).filter { Self.closedByPeer($0, within: 20_000) }.count
            }
            #expect(timedOut == 16)
            let scrape = try await httpGet(port: port, path: "/metrics")
            #expect(scrape.status.hasSuffix("200 OK"))
        }
    }
}
