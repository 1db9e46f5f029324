// The worker scripts/e2e-containers runs in its worker containers (own PID namespace, its own
// uid, only the agent's socket directory shared). Links FleetTokenClient and the C library only.
//
//   fleet-tokend-container-worker raw LINE               one request line on a plain socket; prints the reply line
//   fleet-tokend-container-worker get KIND ID [--reconnect S]
//                                                        one token through the client; prints OK <jwt> <expiry>
//                                                        or ERR <error>, exit 1 on an error
//   fleet-tokend-container-worker shm KIND ID [CALLS]    the token CALLS times (default 50) with shared memory on;
//                                                        prints SHM ok=.. failed=.. shared_memory_reads=..
//   fleet-tokend-container-worker loop SECONDS KIND ID [--reconnect S] [--ids N] [--no-shm] [--no-memo] [--pause-ms MS]
//                                                        client calls for that long (ids ID-0 .. ID-(N-1));
//                                                        prints LOOP ok=.. failed=.. shared_memory_reads=..
//                                                        requests=.., exit 1 on any failure
//   fleet-tokend-container-worker probe SECONDS [--interval-ms MS]
//                                                        connects and PINGs every MS ms (default 5) for that
//                                                        long; prints PROBE attempts=.. failures=.. gap_ms=..
//                                                        (first failed attempt to the first answer after the
//                                                        last failed one; 0 when none failed) errors=..
//                                                        recovered_at_ms=.. (that answer, Unix ms; 0 when none)
//   fleet-tokend-container-worker fill KIND PREFIX COUNT [--batch N]
//                                                        GETs PREFIX-0 .. PREFIX-(COUNT-1) on one connection,
//                                                        N at a time pipelined (default 64); prints FILL ok=..
//                                                        failed=.. ms=.. [first_error=..], exit 1 on a failure
//
// The socket is $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock.
import FleetTokenClient
import Foundation
import Glibc

let socketPath = FleetTokenClient.defaultSocketPath

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("container-worker: \(text)\n".utf8))
    exit(64)
}

func monotonicMilliseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1000 + Double(now.tv_nsec) / 1e6
}

/// The value after `name` in `arguments`, if any.
func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

/// Why a connect failed: its errno.
struct ConnectFailure: Error {
    var code: Int32
}

/// Connects to the agent's socket: the descriptor, or the errno of the failure.
func connectAgent(timeoutMilliseconds: Int) -> Result<Int32, ConnectFailure> {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return .failure(ConnectFailure(code: errno)) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let pathBytes = Array(socketPath.utf8)
    guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else { fail("socket path too long") }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: pathBytes)
        raw[pathBytes.count] = 0
    }
    var timeout = timeval(tv_sec: timeoutMilliseconds / 1000, tv_usec: (timeoutMilliseconds % 1000) * 1000)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    if connected != 0 {
        let failure = ConnectFailure(code: errno)
        close(fd)
        return .failure(failure)
    }
    return .success(fd)
}

/// Sends `line` and a line feed on `fd` and reads one reply line (without its line feed); nil
/// when the peer closed or timed out first.
func exchangeLine(_ fd: Int32, _ line: String) -> String? {
    let request = Array((line + "\n").utf8)
    let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    guard sent == request.count else { return nil }
    var reply: [UInt8] = []
    var byte: UInt8 = 0
    while reply.count < 65_536 {
        let got = recv(fd, &byte, 1, 0)
        guard got == 1 else { return nil }
        if byte == UInt8(ascii: "\n") { return String(decoding: reply, as: UTF8.self) }
        reply.append(byte)
    }
    return nil
}

/// Sends all of `bytes` on `fd`; false when the peer is gone.
func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var sent = 0
    while sent < bytes.count {
        let count = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if count < 0, errno == EINTR { continue }
        guard count > 0 else { return false }
        sent += count
    }
    return true
}

/// Reply lines read from a socket through a buffer (a fill reads tens of MB of replies).
struct LineReader {
    let fd: Int32
    private var buffer: [UInt8] = []
    private var start = 0

    init(fd: Int32) { self.fd = fd }

    /// The next line without its line feed; nil when the peer closed or timed out first.
    mutating func next() -> String? {
        while true {
            if let end = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[start..<end], as: UTF8.self)
                start = end + 1
                if start > 1 << 20 {
                    buffer.removeFirst(start)
                    start = 0
                }
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return nil }
            buffer += chunk[0..<count]
        }
    }
}

func unixMilliseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

func errorName(_ failure: ConnectFailure) -> String {
    switch failure.code {
    case ECONNREFUSED: return "ECONNREFUSED"
    case ENOENT: return "ENOENT"
    case EACCES: return "EACCES"
    case EAGAIN: return "EAGAIN"
    case ECONNRESET: return "ECONNRESET"
    default: return "errno\(failure.code)"
    }
}

func makeClient(_ arguments: [String], sharedMemory: Bool = true, memoization: Bool = true) -> FleetTokenClient {
    var configuration = FleetTokenClient.Configuration()
    configuration.sharedMemory = sharedMemory && !arguments.contains("--no-shm")
    configuration.memoization = memoization && !arguments.contains("--no-memo")
    if let reconnect = option("--reconnect", in: arguments) {
        guard let seconds = TimeInterval(reconnect), seconds > 0 else { fail("bad --reconnect \(reconnect)") }
        configuration.reconnectDeadline = seconds
    }
    return FleetTokenClient(socketPath: socketPath, configuration: configuration)
}

func wireText(_ error: FleetTokenError) -> String {
    switch error {
    case .denied(let text): return "ERR denied \(text)"
    case .unavailable(let text): return "ERR unavailable \(text)"
    case .rejected(let text): return "ERR rejected \(text)"
    case .busy(let text): return "ERR busy \(text)"
    default: return "ERR \(error.description)"
    }
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard let mode = arguments.first else {
    fail(
        "usage: raw LINE | get KIND ID | shm KIND ID [CALLS] | loop SECONDS KIND ID | probe SECONDS | fill KIND PREFIX COUNT"
    )
}
arguments.removeFirst()

switch mode {
case "raw":
    guard !arguments.isEmpty else { fail("raw LINE") }
    switch connectAgent(timeoutMilliseconds: 15_000) {
    case .failure(let code):
        print("CONNECT-FAILED \(errorName(code))")
        exit(1)
    case .success(let fd):
        let reply = exchangeLine(fd, arguments.joined(separator: " "))
        close(fd)
        print(reply ?? "NO-REPLY")
        exit(reply == nil ? 1 : 0)
    }

case "get":
    guard arguments.count >= 2 else { fail("get KIND ID") }
    let client = makeClient(arguments, sharedMemory: false, memoization: false)
    do {
        let token = try await client.token(.kind(arguments[0], arguments[1]))
        print("OK \(token.jwt) \(Int64(token.expiresAt.timeIntervalSince1970))")
    } catch {
        print(wireText(error))
        exit(1)
    }

case "shm":
    guard arguments.count >= 2 else { fail("shm KIND ID [CALLS]") }
    let calls = arguments.count > 2 ? Int(arguments[2]) ?? 50 : 50
    let client = makeClient(arguments)
    var ok = 0
    var failed = 0
    for _ in 0..<calls {
        do {
            _ = try await client.token(.kind(arguments[0], arguments[1]))
            ok += 1
        } catch {
            if failed == 0 { FileHandle.standardError.write(Data("first failure: \(error)\n".utf8)) }
            failed += 1
        }
    }
    print("SHM ok=\(ok) failed=\(failed) shared_memory_reads=\(client.sharedMemoryReads)")
    exit(failed == 0 ? 0 : 1)

case "loop":
    guard arguments.count >= 3, let seconds = Double(arguments[0]) else { fail("loop SECONDS KIND ID") }
    let kind = arguments[1]
    let idBase = arguments[2]
    let ids = option("--ids", in: arguments).flatMap { Int($0) } ?? 4
    let pause = option("--pause-ms", in: arguments).flatMap { Int($0) } ?? 2
    let client = makeClient(arguments)
    var ok = 0
    var failed = 0
    var slowest = 0.0
    let end = monotonicMilliseconds() + seconds * 1000
    var call = 0
    while monotonicMilliseconds() < end {
        let started = monotonicMilliseconds()
        do {
            _ = try await client.token(.kind(kind, "\(idBase)-\(call % ids)"))
            ok += 1
        } catch {
            failed += 1
            FileHandle.standardError.write(Data("call \(call) failed: \(error)\n".utf8))
        }
        slowest = max(slowest, monotonicMilliseconds() - started)
        call += 1
        if pause > 0 { try? await Task.sleep(for: .milliseconds(pause)) }
    }
    let (memoHits, requests) = client.localCounters
    print(
        "LOOP ok=\(ok) failed=\(failed) shared_memory_reads=\(client.sharedMemoryReads) memo_hits=\(memoHits) "
            + "requests=\(requests) slowest_ms=\(Int(slowest)) reconnect_deadline_s=\(client.configuration.reconnectDeadline)"
    )
    exit(failed == 0 && ok > 0 ? 0 : 1)

case "probe":
    guard let seconds = arguments.first.flatMap(Double.init) else { fail("probe SECONDS") }
    let interval = option("--interval-ms", in: arguments).flatMap { Int($0) } ?? 5
    var attempts = 0
    var failures = 0
    var firstFailure: Double?
    var gapEnd: Double?
    var recoveredAt: Int64 = 0
    var errors: [String: Int] = [:]
    let end = monotonicMilliseconds() + seconds * 1000
    while monotonicMilliseconds() < end {
        attempts += 1
        let started = monotonicMilliseconds()
        var failure: String?
        switch connectAgent(timeoutMilliseconds: 1000) {
        case .failure(let code): failure = errorName(code)
        case .success(let fd):
            if exchangeLine(fd, "PING") != "PONG" { failure = "NO-PONG" }
            close(fd)
        }
        if let failure {
            failures += 1
            errors[failure, default: 0] += 1
            if firstFailure == nil { firstFailure = started }
            gapEnd = nil
        } else if firstFailure != nil, gapEnd == nil {
            gapEnd = monotonicMilliseconds()
            recoveredAt = unixMilliseconds()
        }
        usleep(UInt32(interval * 1000))
    }
    let gap = firstFailure.map { start in (gapEnd ?? monotonicMilliseconds()) - start } ?? 0
    let errorText = errors.keys.sorted().map { "\($0):\(errors[$0]!)" }.joined(separator: ",")
    print(
        "PROBE attempts=\(attempts) failures=\(failures) gap_ms=\(Int(gap)) recovered=\(firstFailure == nil || gapEnd != nil) "
            + "errors=\(errorText.isEmpty ? "none" : errorText) recovered_at_ms=\(recoveredAt)"
    )

case "fill":
    guard arguments.count >= 3, let count = Int(arguments[2]), count > 0 else { fail("fill KIND PREFIX COUNT") }
    let kind = arguments[0]
    let prefix = arguments[1]
    let batch = max(1, option("--batch", in: arguments).flatMap { Int($0) } ?? 64)
    let started = monotonicMilliseconds()
    guard case .success(let fd) = connectAgent(timeoutMilliseconds: 60_000) else {
        print("FILL CONNECT-FAILED")
        exit(1)
    }
    var reader = LineReader(fd: fd)
    var ok = 0
    var failed = 0
    var firstError: String?
    var next = 0
    while next < count {
        let end = min(count, next + batch)
        let request = (next..<end).map { "GET \(kind) \(prefix)-\($0)\n" }.joined()
        guard sendAll(fd, Array(request.utf8)) else { fail("the agent closed the connection at \(next)") }
        for _ in next..<end {
            guard let line = reader.next() else { fail("no reply at \(ok + failed) of \(count)") }
            if line.hasPrefix("OK ") {
                ok += 1
            } else {
                failed += 1
                if firstError == nil { firstError = line }
            }
        }
        next = end
    }
    close(fd)
    print(
        "FILL ok=\(ok) failed=\(failed) ms=\(Int(monotonicMilliseconds() - started))"
            + (firstError.map { " first_error=\($0)" } ?? "")
    )
    exit(failed == 0 ? 0 : 1)

default:
    fail("unknown mode \(mode)")
}
