import MetadataEndpoint
import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The endpoint's address could not be bound: the agent stops (exit status 1), and says which
/// address and what to do, as `agent stopped error=…`.
struct MetadataListenError: Error, CustomStringConvertible {
    /// The configured address.
    let address: MetadataListenAddress
    /// The system's error number, when the failure was a system call's.
    let errorNumber: Int32?
    /// The failure, when it was not a system call's.
    let other: String

    init(address: MetadataListenAddress, error: any Error) {
        self.address = address
        self.errorNumber = (error as? IOError)?.errnoCode
        self.other = "\(error)"
    }

    var description: String {
        let reason = errorNumber.map { "\(String(cString: strerror($0))) (errno \($0))" } ?? other
        var text = "metadata_server.listen \(address): cannot listen: \(reason)"
        switch errorNumber {
        case EADDRINUSE:
            text += "; another process holds the port: stop it, or set another port in metadata_server.listen"
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
