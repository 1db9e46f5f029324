import CSystemd

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file descriptor passed by the service manager: a listening socket (socket activation) or one
/// the service stored earlier (the file-descriptor store).
public struct PassedFileDescriptor: Sendable, Hashable {
    /// The descriptor number.
    public var descriptor: Int32
    /// Its name: the socket unit's `FileDescriptorName=` (default the unit name), or the
    /// `FDNAME=` it was stored under.
    public var name: String

    /// Whether it is a listening Unix stream socket.
    public var isListeningUnixStream: Bool {
        sd_is_socket_unix(descriptor, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0
    }

    /// Creates a value.
    public init(descriptor: Int32, name: String) {
        self.descriptor = descriptor
        self.name = name
    }
}

/// Socket activation and the file-descriptor store: what `sd_listen_fds_with_names` passes.
public enum ListenFileDescriptors {
    /// Takes the descriptors passed to this process and clears `LISTEN_PID`, `LISTEN_FDS` and
    /// `LISTEN_FDNAMES` from the environment, so children do not inherit them. Call once.
    public static func take() -> [PassedFileDescriptor] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return [] }
        defer {
            if let names {
                var index = 0
                while let name = names[index] {
                    free(name)
                    index += 1
                }
                free(names)
            }
        }
        let start = csystemd_listen_fds_start()
        return (0..<Int(count)).map { index in
            let name = names?[index].map { String(cString: $0) } ?? "unknown"
            return PassedFileDescriptor(descriptor: start + Int32(index), name: name)
        }
    }
}
