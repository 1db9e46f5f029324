#if canImport(Glibc)
    import Glibc
#endif

/// What the server under test speaks.
enum WireProtocol: String {
    /// fleet-tokend's line protocol: `GET <kind> bench-<n>\n`, replies `OK <token> <expires-at>\n`.
    case agent
    /// Redis's inline commands: `GET bench-<n>\r\n`, replies `$<len>\r\n<bytes>\r\n`.
    case redis
}

/// The command line of `load-gen`.
struct Options {
    var unixPath = ""
    var wire = WireProtocol.agent
    var connections = 1
    var depth = 1
    var keys = 1
    /// The number of the first key: keys are bench-<firstKey> ... bench-<firstKey + keys - 1>.
    var firstKey = 0
    var duration = 10.0
    var warmup = 1.0
    var threads = 1
    var json = false
    /// Send each key once (GET for the agent, SET with `setBytes` for Redis) instead of a timed run.
    var warm = false
    /// Redis only: SET each key to a value of this many bytes (implies `warm`).
    var setBytes = 0
    /// Send exactly this many requests in all (spread over the connections, walking the keys),
    /// then stop, instead of a timed run; 0 for a timed run.
    var requests = 0
    var kind = "vehicle"
    var label = ""

    static let usage = """
        usage: load-gen --unix PATH [--protocol agent|redis] [--connections C] [--depth D] [--keys K]
                        [--duration S] [--warmup S] [--threads T] [--kind KIND] [--label TEXT] [--json]
               load-gen --unix PATH --warm [--protocol agent|redis] [--set-bytes N] ...
               load-gen --unix PATH --requests N [--connections C] [--depth D] [--keys K] ...

          --unix PATH         the server's Unix socket
          --protocol P        agent (GET <kind> bench-<n>) or redis (inline GET bench-<n>); default agent
          --connections C     connections, default 1
          --depth D           requests in flight per connection (pipelined, closed loop), default 1
          --keys K            keys bench-0 ... bench-<K-1>, default 1
          --first-key F       start the keys at bench-<F> instead (new keys beside a measured load)
          --duration S        measured seconds, default 10
          --warmup S          seconds run before measuring, default 1
          --threads T         threads driving the connections (epoll when one drives several), default 1
          --kind KIND         the agent's token kind, default vehicle
          --warm              send each key exactly once over the connections, then stop
          --set-bytes N       with --protocol redis: SET each key to an N-byte value (implies --warm)
          --requests N        send exactly N requests in all (keys in turn), then stop: no clock
          --label TEXT        a name for the run, echoed in the report
          --json              one JSON object on standard output instead of a line of text
        """

    /// A run that ends after a number of requests (`--warm` or `--requests`), not a clock.
    var isCounted: Bool { warm || requests > 0 }

    static func parse(_ arguments: ArraySlice<String>) -> Options {
        var options = Options()
        var rest = arguments
        func value(_ flag: String) -> String {
            guard let next = rest.popFirst() else { fail("\(flag) needs a value") }
            return next
        }
        func integer(_ flag: String, atLeast minimum: Int) -> Int {
            let text = value(flag)
            guard let number = Int(text), number >= minimum else {
                fail("\(flag): \(text) is not a whole number >= \(minimum)")
            }
            return number
        }
        func seconds(_ flag: String) -> Double {
            let text = value(flag)
            guard let number = Double(text), number >= 0, number.isFinite else {
                fail("\(flag): \(text) is not seconds")
            }
            return number
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--unix": options.unixPath = value(flag)
            case "--protocol":
                let text = value(flag)
                guard let wire = WireProtocol(rawValue: text) else { fail("--protocol: \(text) is not agent or redis") }
                options.wire = wire
            case "--connections": options.connections = integer(flag, atLeast: 1)
            case "--depth": options.depth = integer(flag, atLeast: 1)
            case "--keys": options.keys = integer(flag, atLeast: 1)
            case "--first-key": options.firstKey = integer(flag, atLeast: 0)
            case "--duration": options.duration = seconds(flag)
            case "--warmup": options.warmup = seconds(flag)
            case "--threads": options.threads = integer(flag, atLeast: 1)
            case "--kind": options.kind = value(flag)
            case "--label": options.label = value(flag)
            case "--warm": options.warm = true
            case "--set-bytes":
                options.setBytes = integer(flag, atLeast: 1)
                options.warm = true
            case "--requests": options.requests = integer(flag, atLeast: 1)
            case "--json": options.json = true
            case "-h", "--help":
                print(usage)
                exit(0)
            default: fail("unknown option \(flag)")
            }
        }
        if options.unixPath.isEmpty { fail("--unix PATH is required") }
        if options.setBytes > 0 && options.wire != .redis { fail("--set-bytes is for --protocol redis") }
        if options.requests > 0 && options.warm { fail("--requests and --warm do not go together") }
        if options.duration <= 0 && !options.isCounted { fail("--duration must be above 0") }
        options.threads = min(options.threads, options.connections)
        return options
    }
}

func fail(_ message: String) -> Never {
    var text = "load-gen: \(message)\n"
    if message.hasPrefix("unknown") || message.contains("required") { text += Options.usage + "\n" }
    printError(text)
    exit(64)
}

/// Writes `text` to standard error, unbuffered.
func printError(_ text: String) {
    var text = text
    text.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}
