import MetadataEndpoint
import TestSupport
import Testing
import TokenAgentServer

/// What a peer cannot make the endpoint hold: a head it never finishes, a request past the byte
/// limit, connections past the cap.
@Suite struct MetadataLimitsTests {
    static func request(_ address: MetadataListenAddress, path: String = "/") -> [UInt8] {
        Array("GET \(path) HTTP/1.1\r\nHost: \(address)\r\nMetadata-Flavor: Google\r\n\r\n".utf8)
    }

    @Test func aHeadThatNeverComesIsClosed() async throws {
        try await MetadataServerFixture.withServer(limits: MetadataServerFixture.shortHeadTimeout) { address, _ in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            // Half a head, then nothing: closed after the head timeout (1 s here).
            client.send(Array("GET / HTTP/1.1\r\nHost: ".utf8))
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            #expect(outcome.closed)
            #expect(outcome.bytes.isEmpty)
        }
    }

    @Test func aKeptAliveConnectionMustSendItsNextHeadInTime() async throws {
        try await MetadataServerFixture.withServer(limits: MetadataServerFixture.shortHeadTimeout) { address, _ in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            client.send(Self.request(address))
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            #expect(outcome.closed)
            let text = String(decoding: outcome.bytes, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(text.contains("Connection: keep-alive"))
        }
    }

    @Test func aRequestPastTheByteLimitIsClosed() async throws {
        var limits = MetadataServerFixture.testLimits
        limits.maxRequestBytes = 4096
        try await MetadataServerFixture.withServer(limits: limits) { address, _ in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            let filler = String(repeating: "a", count: 8192)
            client.send(Array("GET / HTTP/1.1\r\nHost: \(address)\r\nX-Filler: \(filler)\r\n\r\n".utf8))
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            #expect(outcome.closed)
            #expect(!String(decoding: outcome.bytes, as: UTF8.self).contains("200 OK"))
        }
    }

    @Test func theLimitIsPerRequestOnAKeptAliveConnection() async throws {
        var limits = MetadataServerFixture.testLimits
        limits.maxRequestBytes = 1024
        try await MetadataServerFixture.withServer(limits: limits) { address, _ in
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            // Twenty requests of ~90 bytes, one after the other's answer: 1800 bytes in all.
            for _ in 0..<20 {
                client.send(Self.request(address))
                let answer = try await offPool { () -> String in
                    let read = client.read { String(decoding: $0, as: UTF8.self).hasSuffix("computeMetadata/\n") }
                    return String(decoding: read.bytes, as: UTF8.self)
                }
                #expect(answer.hasPrefix("HTTP/1.1 200 OK"))
            }
        }
    }

    /// A client that sends its request and then shuts its sending side (`socat`, `nc -N`) still
    /// gets the answer, however long the token takes; then the connection is closed.
    @Test func aHalfClosedConnectionGetsItsAnswer() async throws {
        try await MetadataServerFixture.withServer { address, tokens in
            tokens.setDelay(.milliseconds(500))
            let client = try LoopbackSocket.connect(to: address.host, port: address.port)
            let path = "/computeMetadata/v1/instance/service-accounts/default/token"
            client.send(Self.request(address, path: path))
            client.shutdownWrite()
            let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
            let text = String(decoding: outcome.bytes, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 200 OK"), "\(text)")
            #expect(text.contains(#""token_type":"Bearer"}"#))
            #expect(outcome.closed)
        }
    }

    @Test func pastTheCapTheOldestWaitingConnectionMakesRoom() async throws {
        var limits = MetadataServerFixture.testLimits
        limits.maxConnections = 2
        // Only the eviction closes the oldest within the wait.
        limits.headTimeout = .seconds(Int64(hangLimit) * 2)
        limits.idleTimeout = .seconds(Int64(hangLimit) * 2)
        try await MetadataServerFixture.withServer(limits: limits) { address, _ in
            let oldest = try LoopbackSocket.connect(to: address.host, port: address.port)
            let second = try LoopbackSocket.connect(to: address.host, port: address.port)
            _ = second
            // Let the server accept both before the third.
            try await Task.sleep(for: .milliseconds(200))
            let third = try LoopbackSocket.connect(to: address.host, port: address.port)
            let evicted = try await offPool { oldest.readUntilClosed(timeout: hangLimit) }
            #expect(evicted.closed)
            third.send(Self.request(address))
            let answered = try await offPool {
                third.read { String(decoding: $0, as: UTF8.self).hasSuffix("computeMetadata/\n") }
            }
            #expect(String(decoding: answered.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK"))
        }
    }
}
