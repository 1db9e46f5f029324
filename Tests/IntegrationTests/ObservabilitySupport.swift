import Foundation
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// One sample of a Prometheus exposition as Prometheus' own Python parser read it.
struct ParsedSample: Hashable {
    var name: String
    var labels: [String: String]
    var value: Double
}

/// Parses `text` with `prometheus_client`'s text parser (installed by scripts/ensure-tools.sh),
/// in a python3 process; throws when the parser refuses the text.
func prometheusParse(_ text: String) async throws -> [ParsedSample] {
    let script = """
        import json, sys
        from prometheus_client.parser import text_string_to_metric_families
        out = []
        for family in text_string_to_metric_families(sys.stdin.read()):
            for s in family.samples:
                out.append([s.name, s.labels, s.value, family.type])
        print(json.dumps(out))
        """
    guard let python = which("python3") else { throw AgentError("python3 is not on PATH") }
    let result = try await run(python, ["-c", script], stdin: text)
    guard result.status == 0, let data = result.stdout.data(using: .utf8),
        let rows = try JSONSerialization.jsonObject(with: data) as? [[Any]]
    else {
        throw AgentError("prometheus_client refused the exposition (status \(result.status)): \(result.stderr)")
    }
    return rows.compactMap { row in
        guard row.count >= 3, let name = row[0] as? String, let labels = row[1] as? [String: String] else {
            return nil
        }
        let value = (row[2] as? Double) ?? Double((row[2] as? Int) ?? 0)
        return ParsedSample(name: name, labels: labels, value: value)
    }
}

extension [ParsedSample] {
    /// The value of the sample `name` with exactly `labels`; 0 when there is none.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double {
        first { $0.name == name && $0.labels == labels }?.value ?? 0
    }

    /// Whether a sample `name` with exactly `labels` exists.
    func has(_ name: String, _ labels: [String: String] = [:]) -> Bool {
        contains { $0.name == name && $0.labels == labels }
    }
}

extension AgentProcess {
    /// Sends `METRICS` on its own connection and returns the exposition's lines (without the
    /// `# EOF` line), or the one error line.
    func metricsLines(extra: String = "") async throws -> [String] {
        let lines = try await SocketClient.exchange(socketPath, "METRICS\n" + extra, lines: nil, halfClose: true)
        return lines
    }

    /// The exposition of one `METRICS`, `# EOF` removed after checking it ends the reply.
    func metricsText() async throws -> String {
        let lines = try await metricsLines()
        guard lines.last == "# EOF" else { throw AgentError("METRICS did not end with # EOF: \(lines.suffix(3))") }
        return lines.dropLast().map { $0 + "\n" }.joined()
    }
}

/// A free TCP port on 127.0.0.1, bound and released for the agent to bind. It is picked below the
/// kernel's ephemeral range (32768 and up): a port the kernel handed out would go to the next
/// outgoing connection of any test running meanwhile, while one down here is only ever taken by a
/// listener that asks for it.
func freeLoopbackPort() throws -> Int {
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<200 {
        let port = Int.random(in: 20_000..<32_000, using: &generator)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let bound = withLoopbackAddress(port: port) { bind(fd, $0, $1) }
        close(fd)
        if bound == 0 { return port }
    }
    throw AgentError("cannot find a free loopback port")
}

/// Calls `body` with the address 127.0.0.1:`port` and its length.
func withLoopbackAddress<R>(port: Int, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}

/// A blocking TCP connection to 127.0.0.1:`port`; -1 when it cannot connect. Blocking: call it
/// off the pool.
func connectLoopback(port: Int) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return -1 }
    let connected = withLoopbackAddress(port: port) { connect(fd, $0, $1) }
    guard connected == 0 else {
        close(fd)
        return -1
    }
    return fd
}

/// `GET path` over HTTP/1.0 on 127.0.0.1:`port`: the status line and the body.
func httpGet(port: Int, path: String) async throws -> (status: String, body: String) {
    let reply = try await rawHTTPExchange(port: port, "GET \(path) HTTP/1.0\r\nHost: localhost\r\n\r\n")
    return (reply.status, reply.body)
}

/// Sends `request` whole on a new connection to 127.0.0.1:`port` and reads until the server
/// closes it: the status line, the headers (names lowercased) and the body.
func rawHTTPExchange(port: Int, _ request: String) async throws -> (
    status: String, headers: [String: String], body: String
) {
    try await offPool {
        let fd = connectLoopback(port: port)
        guard fd >= 0 else { throw AgentError("connect to 127.0.0.1:\(port) failed") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let bytes = Array(request.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            received += chunk[..<count]
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw AgentError("no HTTP reply: \(text)") }
        let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces
            )
        }
        return (lines.first ?? "", headers, String(text[split.upperBound...]))
    }
}
