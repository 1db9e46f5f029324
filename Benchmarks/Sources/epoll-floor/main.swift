// A bare epoll server on a Unix socket that answers `GET <kind> bench-<n>` with a fixed 683-byte
// token, as the agent would (`OK <token> <expires-at>`): no access check, no cache, no segment,
// a reply table indexed by <n>. It measures the floor a purpose-built event loop in Swift could
// reach on this machine, side by side with Redis and the agent under the same load-gen
// (docs/BENCHMARKS-METHOD.md, "Where the socket's floor is"). Not the agent; nothing else uses it.
//   epoll-floor --unix PATH [--loops N] [--keys K]
import CEpoll
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
/// Every argument is an option and its value, of the three known; anything else (`--help`
/// included) prints the usage and exits, so no run serves on a path it was not given.
func usage() -> Never {
    let text = Array("usage: epoll-floor --unix PATH [--loops N] [--keys K]\n".utf8)
    _ = text.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(64)
}
var options: [String: String] = [:]
var index = 0
while index < arguments.count {
    guard ["--unix", "--loops", "--keys"].contains(arguments[index]), index + 1 < arguments.count else { usage() }
    options[arguments[index]] = arguments[index + 1]
    index += 2
}
guard let path = options["--unix"], let loops = Int(options["--loops"] ?? "2"), loops > 0,
    let keys = Int(options["--keys"] ?? "64"), keys > 0
else { usage() }

/// `OK <token> <expires-at>\n` for each key: what the agent sends for a hit.
let replies: [[UInt8]] = (0..<keys).map { key in
    let token = "tok-bench-\(key)-" + String(repeating: "x", count: 683 - "tok-bench-\(key)-".utf8.count)
    return Array("OK \(token) 1900000000\n".utf8)
}
let miss = Array("ERR not-found\n".utf8)

// A load-gen closing its connections at the end of a run leaves replies to write to a closed
// peer: without this, the first such write's SIGPIPE ends the floor between two runs.
signal(SIGPIPE, SIG_IGN)
unlink(path)
let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
var address = sockaddr_un()
address.sun_family = sa_family_t(AF_UNIX)
withUnsafeMutableBytes(of: &address.sun_path) { raw in
    for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
}
let bound = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
    }
}
precondition(bound == 0 && listen(listener, 1024) == 0, "bind/listen \(path): \(errno)")

setup = Setup(listener: listener, replies: replies, miss: miss)
var threads: [pthread_t] = []
for _ in 0..<loops {
    var thread = pthread_t()
    pthread_create(&thread, nil, loopThread, nil)
    threads.append(thread)
}
for thread in threads { pthread_join(thread, nil) }
