import Foundation
import Logging
import Systemd
import TokenAgent

/// Hands the cache to the next agent process through systemd's file-descriptor store, without
/// touching disk: at stop the tokens go into a sealed memory file stored as `FDNAME=cache`; at
/// start that file comes back through `sd_listen_fds_with_names`, is read, and is dropped from the
/// store. Without an fd store (no `NOTIFY_SOCKET`) nothing happens.
enum CacheHandover {
    /// The name the cache is stored under.
    static let name = "cache"

    /// Loads tokens from the passed cache files into `engine`, closes them, and removes them
    /// from the store. Only the tokens of kinds whose provider digest (`providers`) is the one
    /// the snapshot records are taken: the others come from another provider or other rules.
    static func restore(
        from files: [PassedFileDescriptor],
        into engine: TokenEngine,
        providers: [String: String],
        notifier: SystemdNotifier,
        logger: Logger
    ) {
        guard !files.isEmpty else { return }
        var taken = 0
        var skipped = 0
        for file in files {
            defer { close(file.descriptor) }
            guard SealedMemoryFile.isSealed(file.descriptor) else {
                logger.warning("ignoring an unsealed cache file from the fd store")
                continue
            }
            do {
                let contents = CacheSnapshot.contents(of: try SealedMemoryFile.read(file.descriptor))
                let same = contents.tokens.filter { token in
                    providers[token.kind].map { $0 == contents.providers[token.kind] } ?? false
                }
                skipped += contents.tokens.count - same.count
                taken += engine.importTokens(same, from: .memory)
            } catch {
                logger.warning("cannot read the cache from the fd store", metadata: ["error": "\(error)"])
            }
        }
        notifier.removeStored(name: name)
        logger.info(
            "cache taken over from the previous process",
            metadata: ["tokens": "\(taken)", "tokens_of_changed_providers": "\(skipped)"]
        )
    }

    /// Stores `engine`'s servable tokens in the fd store, if there is one, with the digest of the
    /// provider of each kind (`providers`).
    static func save(_ engine: TokenEngine, providers: [String: String], notifier: SystemdNotifier, logger: Logger) {
        guard notifier.isEnabled else { return }
        let tokens = engine.exportTokens(to: .memory)
        guard !tokens.isEmpty else { return }
        do {
            let fd = try SealedMemoryFile.create(
                name: "fleet-tokend-cache",
                bytes: CacheSnapshot.encode(tokens, providers: providers)
            )
            defer { close(fd) }
            if notifier.store(fileDescriptor: fd, name: name) {
                logger.info("cache handed to the fd store", metadata: ["tokens": "\(tokens.count)"])
            } else {
                logger.info("no fd store: the cache is not kept across restarts")
            }
        } catch {
            logger.warning("cannot store the cache", metadata: ["error": "\(error)"])
        }
    }
}
