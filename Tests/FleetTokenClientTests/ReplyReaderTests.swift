import CSharedMemory
import Testing
import TokenWire

@testable import FleetTokenClient

#if canImport(Glibc)
    import Glibc
#endif

/// ``ReplyReader`` reading what a test writes as the agent (or as something hostile pretending to
/// be it) on the other end of a socket pair.
@Suite("Client: reply reader")
struct ReplyReaderTests {
    @Test func aWholeReplyLineIsParsed() throws {
        let pair = try SocketPair()
        pair.send("OK tok-1 1900000000\n")
        let (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.token("tok-1", expiresAt: 1_900_000_000)])
        #expect(replies.map(\.descriptor) == [nil])
        #expect(failure == nil)
    }

    @Test func aReplySplitAcrossReadsWaitsForTheEndOfItsLine() throws {
        let pair = try SocketPair()
        pair.send("OK tok-1 19000")
        var (replies, failure) = pair.read()
        #expect(replies.isEmpty, "half a line is no reply")
        #expect(failure == nil)
        pair.send("00000\r")
        (replies, failure) = pair.read()
        #expect(replies.isEmpty, "a line without its LF is no reply, even after its CR")
        pair.send("\nPO")
        (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.token("tok-1", expiresAt: 1_900_000_000)])
        pair.send("NG\n")
        (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.pong])
        #expect(failure == nil)
    }

    @Test func pipelinedRepliesComeBackInOrder() throws {
        let pair = try SocketPair()
        pair.send(
            "OK a 1\nPONG\nERR unavailable provider down\nOK\nOK hits=3 misses=1\nERR busy too many\nOK b 2\r\n"
        )
        let (replies, failure) = pair.read()
        #expect(
            replies.map(\.reply) == [
                .token("a", expiresAt: 1),
                .pong,
                .error(WireError(.unavailable, "provider down")),
                .ok(""),
                .ok("hits=3 misses=1"),
                .error(WireError(.busy, "too many")),
                .token("b", expiresAt: 2),
            ]
        )
        #expect(failure == nil)
    }

    @Test func aMetricsReplyIsOneReplyOfSeveralLines() throws {
        let pair = try SocketPair()
        pair.send("# HELP requests Requests.\n# TYPE requests counter\n")
        var (replies, failure) = pair.read()
        #expect(replies.isEmpty, "no reply before its # EOF")
        pair.send("requests 7\n# EOF\nPONG\n")
        (replies, failure) = pair.read()
        #expect(
            replies.map(\.reply) == [.ok("# HELP requests Requests.\n# TYPE requests counter\nrequests 7\n"), .pong]
        )
        #expect(failure == nil)
    }

    /// docs/PROTOCOL.md: a `METRICS` reply ends at the line `# EOF`, "a CR before its LF is
    /// allowed, as everywhere"; the CR is no part of any line. The reply after it is its own.
    @Test func aMetricsReplyOfCRLFLinesEndsAtItsEOFLine() throws {
        let pair = try SocketPair()
        pair.send("# TYPE requests counter\r\nrequests 7\r\n# EOF\r\nPONG\r\n")
        let (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.ok("# TYPE requests counter\nrequests 7\n"), .pong])
        #expect(failure == nil)
    }

    /// Lines no agent sends: each breaks the protocol, after the replies read before it.
    @Test(arguments: [
        "HELLO", "ERR no-such-code text", "PONG extra", "ok tok 1", "", "OKtok 1", "\u{1}", "ERR",
    ])
    func anUnreadableLineBreaksTheProtocolAfterTheRepliesBeforeIt(_ line: String) throws {
        let pair = try SocketPair()
        pair.send("PONG\n\(line)\nPONG\n")
        let (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.pong])
        #expect(failure?.reason == "unreadable reply from the agent")
        #expect(failure?.brokeProtocol == true)
    }

    @Test func aLineOverTheLimitIsRefusedBeforeItEnds() throws {
        let pair = try SocketPair()
        // One byte over the limit and no LF yet: it can no longer end within the limit.
        pair.send("OK " + String(repeating: "a", count: WireLimits.maxReplyLineBytes - 2))
        let (replies, failure) = pair.read()
        #expect(replies.isEmpty)
        #expect(failure?.reason == "reply line over \(WireLimits.maxReplyLineBytes) bytes")
        #expect(failure?.brokeProtocol == true)
    }

    @Test func aLineAtTheLimitIsReadAndItsCRIsNotCounted() throws {
        let pair = try SocketPair()
        let token = String(repeating: "t", count: WireLimits.maxReplyLineBytes - "OK  1".utf8.count)
        pair.send("OK \(token) 1\r\nPONG\n")
        let (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.token(token, expiresAt: 1), .pong])
        #expect(failure == nil)
    }

    /// A `METRICS` reply that never ends is refused once its body passes the bound, however it is
    /// cut into lines.
    @Test func aMetricsReplyOverItsBoundIsRefused() throws {
        let pair = try SocketPair()
        let line = Array(("# " + String(repeating: "m", count: 998) + "\n").utf8)
        let chunk = Array(repeating: line, count: 64).flatMap { $0 }
        var replies: [ReceivedReply] = []
        var failure: ReadFailure?
        var written = 0
        var pendingBytes = chunk[...]
        while failure == nil, written < 2 * WireLimits.maxMetricsReplyBytes {
            if pendingBytes.isEmpty { pendingBytes = chunk[...] }
            let count = pendingBytes.withUnsafeBytes { send(pair.agent, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count > 0 {
                written += count
                pendingBytes = pendingBytes.dropFirst(count)
            }
            failure = pair.reader.readReplies(from: pair.client, into: &replies)
        }
        #expect(replies.isEmpty)
        #expect(failure?.reason == "METRICS reply over \(WireLimits.maxMetricsReplyBytes) bytes")
        #expect(failure?.brokeProtocol == true)
        #expect(written >= WireLimits.maxMetricsReplyBytes, "refused only past the bound")
    }

    @Test func theEndOfTheStreamIsALostConnectionNotABrokenProtocol() throws {
        let pair = try SocketPair()
        pair.send("PONG\n")
        pair.closeAgentEnd()
        let (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.pong])
        #expect(failure?.reason == "the agent closed the connection")
        #expect(failure?.brokeProtocol == false)
    }

    @Test func aSegmentReplyGetsTheDescriptorThatCameWithIt() throws {
        let pair = try SocketPair()
        let pipe = try TestPipe()
        pair.send("OK size=4096 layout=2 generation=3\n", with: pipe.writeEnd)
        pipe.closeWriteEnd()
        let (replies, failure) = pair.read()
        #expect(failure == nil)
        #expect(replies.map(\.reply) == [.ok("size=4096 layout=2 generation=3")])
        let descriptor = try #require(replies.first?.descriptor)
        // The descriptor is the pipe's write end: what is written to it comes out of the read end.
        #expect(write(descriptor, "x", 1) == 1)
        #expect(pipe.readByte() == .byte(UInt8(ascii: "x")))
        close(descriptor)
        #expect(pipe.readByte() == .endOfStream)
    }

    /// A descriptor riding on a reply that takes none is closed: a hostile agent cannot fill the
    /// client's descriptor table.
    @Test(arguments: ["OK tok-1 1900000000", "PONG", "ERR busy later", "OK hits=1", "OK"])
    func aDescriptorOnAReplyThatTakesNoneIsClosed(_ line: String) throws {
        let pair = try SocketPair()
        let pipe = try TestPipe()
        pair.send("\(line)\n", with: pipe.writeEnd)
        pipe.closeWriteEnd()
        let (replies, failure) = pair.read()
        #expect(failure == nil)
        #expect(replies.count == 1)
        #expect(replies.map(\.descriptor) == [nil])
        #expect(pipe.readByte() == .endOfStream, "no copy of the write end is left open")
    }

    @Test func aDescriptorWaitsForTheRestOfItsSegmentReply() throws {
        let pair = try SocketPair()
        let pipe = try TestPipe()
        pair.send("PONG\n")
        pair.send("OK size=40", with: pipe.writeEnd)
        pipe.closeWriteEnd()
        var (replies, failure) = pair.read()
        #expect(replies.map(\.reply) == [.pong])
        #expect(replies.map(\.descriptor) == [nil])
        #expect(pipe.readByte() == .wouldBlock, "the reader holds the descriptor for the partial line")
        pair.send("96 layout=2\n")
        (replies, failure) = pair.read()
        #expect(failure == nil)
        #expect(replies.map(\.reply) == [.ok("size=4096 layout=2")])
        let descriptor = try #require(replies.first?.descriptor)
        close(descriptor)
        #expect(pipe.readByte() == .endOfStream)
    }

    @Test func aDescriptorNoReplyTookIsClosedWhenTheConnectionEnds() throws {
        let pair = try SocketPair()
        let pipe = try TestPipe()
        pair.send("OK size=40", with: pipe.writeEnd)
        pipe.closeWriteEnd()
        let (replies, _) = pair.read()
        #expect(replies.isEmpty)
        #expect(pipe.readByte() == .wouldBlock)
        pair.reader.closeDescriptors()
        #expect(pipe.readByte() == .endOfStream)
    }

    /// The reader reads `OK <token> <expires-at>` without building a string of the line; every
    /// line must get the answer ``WireReply/parse(_:)`` gives it.
    @Test func theTokenFastPathAgreesWithTheParser() {
        var lines = [
            "OK tok 1", "OK tok 0123", "OK tok +12", "OK tok -5", "OK tok 999999999999999999",
            "OK tok 9223372036854775807", "OK tok 9223372036854775808", "OK  12", "OK t=x 12", "OK tok 12 13",
            "OK tok 12\r", "OK tok\r 12", "OK tok 1\r\r", "OK tok", "OK tok ", "OK \u{E9}t\u{E9} 42", "OK tok 1a",
        ]
        var generator = SplitMix64(seed: 0x5EED)
        let pieces = ["OK", " ", "tok", "=", "0", "7", "9", "-", "+", "\r", "x", "\u{E9}", "PONG", "ERR", "busy"]
        for _ in 0..<5000 {
            let count = Int.random(in: 1...8, using: &generator)
            lines.append((0..<count).map { _ in pieces.randomElement(using: &generator)! }.joined())
        }
        for line in lines {
            let fast = Array(line.utf8).withUnsafeBufferPointer { ReplyReader.reply($0) }
            #expect(fast == WireReply.parse(Substring(line)), "line \(Array(line.utf8))")
        }
    }
}

/// A connected pair of non-blocking stream sockets: the test writes as the agent on one end and a
/// ``ReplyReader`` reads the other.
final class SocketPair {
    let agent: Int32
    let client: Int32
    var reader = ReplyReader()
    private var agentOpen = true

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0 else {
            throw TestFailure("socketpair: \(String(cString: strerror(errno)))")
        }
        (agent, client) = (fds[0], fds[1])
    }

    deinit {
        reader.closeDescriptors()
        if agentOpen { close(agent) }
        close(client)
    }

    /// Writes `text` whole (small writes never fill the socket's buffer).
    func send(_ text: String) {
        let bytes = Array(text.utf8)
        let count = bytes.withUnsafeBytes { Glibc.send(agent, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        #expect(count == bytes.count)
    }

    /// Writes `text` with `descriptor` riding on its first byte, as the agent sends a segment.
    func send(_ text: String, with descriptor: Int32) {
        let bytes = Array(text.utf8)
        let count = bytes.withUnsafeBytes { fsm_send_with_descriptor(agent, $0.baseAddress, $0.count, descriptor) }
        #expect(count == bytes.count)
    }

    func closeAgentEnd() {
        close(agent)
        agentOpen = false
    }

    /// Reads until nothing more waits on the socket or the reader stops: every reply, and why it
    /// stopped (`nil` when the connection goes on).
    func read() -> (replies: [ReceivedReply], failure: ReadFailure?) {
        var replies: [ReceivedReply] = []
        while true {
            if let failure = reader.readReplies(from: client, into: &replies) { return (replies, failure) }
            var waiting = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            if poll(&waiting, 1, 0) <= 0 { return (replies, nil) }
        }
    }
}

/// A pipe whose read end tells whether any copy of its write end is still open anywhere.
final class TestPipe {
    let readEnd: Int32
    let writeEnd: Int32
    private var writeEndOpen = true

    enum Read: Equatable {
        case byte(UInt8)
        /// Every copy of the write end is closed.
        case endOfStream
        /// A copy of the write end is open and nothing was written.
        case wouldBlock
    }

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TestFailure("pipe: \(String(cString: strerror(errno)))") }
        (readEnd, writeEnd) = (fds[0], fds[1])
        _ = fcntl(readEnd, F_SETFL, O_NONBLOCK)
    }

    deinit {
        close(readEnd)
        if writeEndOpen { close(writeEnd) }
    }

    /// Closes this process's own copy of the write end (after sending it).
    func closeWriteEnd() {
        close(writeEnd)
        writeEndOpen = false
    }

    func readByte() -> Read {
        var byte: UInt8 = 0
        let count = Glibc.read(readEnd, &byte, 1)
        if count == 1 { return .byte(byte) }
        if count == 0 { return .endOfStream }
        return .wouldBlock
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A small seeded generator (SplitMix64), so random inputs are the same on every run.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
