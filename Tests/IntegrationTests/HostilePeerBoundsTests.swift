import Foundation
import Synchronization
import TestSupport
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
            let deadline = Date().addingTimeInterval(hangLimit)
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

    /// Waits until the metrics listener on `port` answers a scrape.
    private func waitForListener(port: Int) async throws -> Bool {
        for _ in 0..<100 {
            if (try? await httpGet(port: port, path: "/metrics")) != nil { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    @Test func idleScrapeConnectionsAreCappedAndTimedOut() async throws {
        let port = try freeLoopbackPort()
        let flags = ["--metrics-listen", "127.0.0.1:\(port)", "--metrics-head-timeout", "3"]
        try await withProviderAndAgent(flags) { agent, _ in
            #expect(try await waitForListener(port: port))
            let connections = try await offPool { (0..<64).map { _ in Self.connectNonBlocking(port: port) } }
            defer { for fd in connections where fd >= 0 { close(fd) } }
            #expect(connections.allSatisfy { $0 >= 0 })
            // Past the cap (16), each new connection closes the oldest one still waiting for its
            // request: the first 48 are closed as soon as the later ones come.
            let evicted = try await offPool {
                connections.prefix(48).filter { Self.closedByPeer($0, within: 3000) }.count
            }
            #expect(evicted == 48, "\(evicted) of the 48 oldest were closed to make room")
            #expect(try await agent.send("GET vehicle v-1").first?.hasPrefix("OK ") == true)
            // The last 16 never send a request: closed at the head time-out (3 s).
            let timedOut = try await offPool {
                connections.suffix(16).filter { Self.closedByPeer($0, within: 20_000) }.count
            }
            #expect(timedOut == 16)
            let scrape = try await httpGet(port: port, path: "/metrics")
            #expect(scrape.status.hasSuffix("200 OK"))
        }
    }

    /// Sixteen peers that each send a request one byte a second (never whole) do not keep
    /// scrapers out: every scrape is answered, and every trickling peer is closed (made room for,
    /// or cut at the head time-out) although it never went idle.
    @Test func tricklingPeersDoNotKeepScrapersOut() async throws {
        let port = try freeLoopbackPort()
        let flags = ["--metrics-listen", "127.0.0.1:\(port)", "--metrics-head-timeout", "3"]
        try await withProviderAndAgent(flags) { _, _ in
            #expect(try await waitForListener(port: port))
            let stop = TrickleStop()
            let trickled = Task {
                try await offPool { Self.trickle(port: port, peers: 16, until: stop) }
            }
            // Let the trickling peers take every place first.
            try await Task.sleep(for: .milliseconds(500))
            var answered = 0
            for _ in 0..<20 {
                if let scrape = try? await httpGet(port: port, path: "/metrics"), scrape.status.hasSuffix("200 OK"),
                    scrape.body.contains("fleet_tokend_")
                {
                    answered += 1
                }
            }
            #expect(answered == 20, "\(answered) of 20 scrapes answered amid 16 trickling peers")
            // Every trickling peer is closed by the agent within the head time-out (and room for
            // the scrapes), though each sent a byte a second.
            try await Task.sleep(for: .seconds(8))
            stop.stop()
            let closed = try await trickled.value
            #expect(closed == 16, "\(closed) of 16 trickling peers closed by the agent")
        }
    }

    /// When to stop trickling.
    private final class TrickleStop: Sendable {
        private let stopped = Mutex(false)
        func stop() { stopped.withLock { $0 = true } }
        var isStopped: Bool { stopped.withLock { $0 } }
    }

    /// Connects `peers` peers that each send `GET /metrics HTTP/1.1\r\n` and then a header one
    /// byte a second, never ending the head, until `stop`; returns how many the agent closed.
    private static func trickle(port: Int, peers: Int, until stop: TrickleStop) -> Int {
        let fds = (0..<peers).map { _ in connectNonBlocking(port: port) }
        defer { for fd in fds where fd >= 0 { close(fd) } }
        var closed = Set<Int32>()
        let start = Array("GET /metrics HTTP/1.1\r\n".utf8)
        for fd in fds where fd >= 0 {
            _ = start.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        var byte: UInt8 = UInt8(ascii: "X")
        while !stop.isStopped {
            for fd in fds where fd >= 0 && !closed.contains(fd) {
                if closedByPeer(fd, within: 1) {
                    closed.insert(fd)
                    continue
                }
                if send(fd, &byte, 1, Int32(MSG_NOSIGNAL)) < 0 && errno != EAGAIN { closed.insert(fd) }
            }
            usleep(1_000_000)
        }
        for fd in fds where fd >= 0 && !closed.contains(fd) && closedByPeer(fd, within: 100) { closed.insert(fd) }
        return closed.count
    }

    /// RFC 9112 section 3.2.2: an absolute-form target is served as its path; RFC 9110 section
    /// 9.3.2: HEAD gets GET's headers, Content-Length included, and no body.
    @Test func absoluteFormTargetsAndHeadFollowTheRFCs() async throws {
        let port = try freeLoopbackPort()
        try await withProviderAndAgent(["--metrics-listen", "127.0.0.1:\(port)"]) { _, _ in
            #expect(try await waitForListener(port: port))
            let absolute = try await httpGet(port: port, path: "http://127.0.0.1:\(port)/metrics")
            #expect(absolute.status.hasSuffix("200 OK"), "\(absolute.status)")
            #expect(absolute.body.contains("fleet_tokend_healthy"))
            let elsewhere = try await httpGet(port: port, path: "http://127.0.0.1:\(port)/other")
            #expect(elsewhere.status.hasSuffix("404 Not Found"))
            let head = try await rawHTTPExchange(port: port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            let get = try await rawHTTPExchange(port: port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(head.status.hasSuffix("200 OK"))
            #expect(head.body.isEmpty, "no body after HEAD's head")
            let headLength = Int(head.headers["content-length"] ?? "") ?? 0
            let getLength = Int(get.headers["content-length"] ?? "") ?? -1
            #expect(getLength == get.body.utf8.count)
            // The exposition may be rendered again between the two (a counter moved): the lengths
            // are those of one exposition, within a few bytes.
            #expect(headLength > 1000 && abs(headLength - getLength) < 256, "HEAD \(headLength), GET \(getLength)")
            #expect(head.headers["content-type"] == get.headers["content-type"])
        }
    }
}
