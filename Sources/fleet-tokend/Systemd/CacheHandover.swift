import Logging
import Systemd
import TokenAgent
import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Hands the cache to the next agent process through systemd's file-descriptor store, without
/// touching disk: the snapshot goes into a sealed memory file stored as `FDNAME=cache` (at start,
/// every `cache_file_interval` and at stop, so a crash keeps the last one); at start that file
/// comes back through `sd_listen_fds_with_names`, is read, and is dropped from the store. Without
/// an fd store (no `NOTIFY_SOCKET`) nothing happens.
enum CacheHandover {
    /// The name the cache is stored under.
    static let name = "cache"

    /// The snapshots in the passed cache files, each closed once read; the store's copies are
    /// dropped (the first write of this process stores a fresh one). A file that is not sealed, or
    /// that fails the snapshot's checks (an unknown format version among them), is skipped with a
    /// warning.
    static func restore(
        from files: [PassedFileDescriptor],
        maxTokens: Int = .max,
        notifier: SystemdNotifier,
        logger: Logger
    ) -> [CacheSnapshot.Contents] {
        guard !files.isEmpty else { return [] }
        var snapshots: [CacheSnapshot.Contents] = []
        for file in files {
            defer { close(file.descriptor) }
            guard SealedMemoryFile.isSealed(file.descriptor) else {
                logger.warning("ignoring an unsealed cache file from the fd store")
                continue
            }
            do {
                let bytes = try SealedMemoryFile.read(file.descriptor, limit: CacheSnapshot.maxBytes + 1)
                snapshots.append(try CacheSnapshot.read(bytes, maxTokens: maxTokens))
            } catch {
                logger.warning("cannot read the cache from the fd store", metadata: ["error": "\(error)"])
            }
        }
        notifier.removeStored(name: name)
        return snapshots
    }
}

/// systemd's file-descriptor store as a place for cache snapshots: each snapshot goes into a new
/// memory file, which the commit seals and stores in the place of the stored one (none when it
/// holds no token).
struct FDStoreDestination: SnapshotDestination {
    /// The service manager did not take the descriptor.
    struct NotTaken: Error, CustomStringConvertible {
        var description: String { "the service manager did not take the descriptor" }
    }

    let notifier: SystemdNotifier

    var name: String { "fd_store" }

    /// A sealed memory file, never on disk: every kind's tokens, access tokens too.
    var medium: TokenCacheMedium { .memory }

    func begin() throws -> any SnapshotSink {
        // Without a service manager there is nowhere to store it: the snapshot goes nowhere.
        DescriptorSink(
            fd: notifier.isEnabled ? try SealedMemoryFile.createUnsealed(name: "fleet-tokend-cache") : nil,
            placement: StoredMemoryFile(notifier: notifier)
        )
    }

    /// A snapshot's memory file: sealed, then stored in the place of the stored one.
    struct StoredMemoryFile: DescriptorPlacement {
        let notifier: SystemdNotifier

        func seal(_ fd: Int32, _ framing: CacheSnapshot.Encoded) throws {
            // Sealed before the old one is dropped: a failure here leaves the stored one.
            try SealedMemoryFile.seal(fd)
            notifier.removeStored(name: CacheHandover.name)
            guard framing.tokenCount > 0 else { return }
            guard notifier.store(fileDescriptor: fd, name: CacheHandover.name) else { throw NotTaken() }
        }
    }
}
