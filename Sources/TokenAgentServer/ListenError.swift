import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// An HTTP listener's address could not be bound (`metadata_server.listen`, `metrics_listen`): the
/// agent stops (exit status 1) before it says it is ready, and says which key, which address and
/// what to do, as `agent stopped error=…`.
struct ListenError: Error, CustomStringConvertible {
    /// The configuration key that set the address.
    let key: String
    /// The configured address, as the logs write it.
    let address: String
    /// The system's error number, when the failure was a system call's.
    let errorNumber: Int32?
    /// The failure, when it was not a system call's.
    let other: String

    init(key: String, address: String, error: any Error) {
        self.key = key
        self.address = address
        self.errorNumber = (error as? IOError)?.errnoCode
        self.other = "\(error)"
    }

    var description: String {
        let reason = errorNumber.map { "\(String(cString: strerror($0))) (errno \($0))" } ?? other
        var text = "\(key) \(address): cannot listen: \(reason)"
        switch errorNumber {
        case EADDRINUSE:
            text += "; another process holds the port: stop it, or set another port in \(key)"
        case EADDRNOTAVAIL:
            text += "; the address is not one of this host's (IPv6 off, or no such loopback address here)"
        case EACCES:
            text += "; a port below 1024 needs CAP_NET_BIND_SERVICE"
        default:
            break
        }
        return text
    }
}
