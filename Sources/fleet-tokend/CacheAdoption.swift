import Logging
import Systemd
import TokenAgent
import TokenAgentServer

/// Takes over the previous process's tokens at start, before the socket listens (and so before
/// `READY=1`): from systemd's fd store when it passed a cache (it wins: it is at least as new as
/// any file), else from the cache file. Either way only the tokens ``SnapshotAdoption`` lets
/// through are taken, and from the file never an access token (``TokenCacheMedium/disk``: the
/// agent never writes one there, and takes none a file holds); a file refused as a whole (a link, another owner, group or other bits, too
/// large, a wrong length, checksum or version) is logged and the agent starts cold. No more
/// token lines are decoded than `max_entries` (``CacheSnapshot/read(_:maxTokens:)``):
/// the cache could hold no more, and a file of millions of tiny lines must not cost a token each.
enum CacheAdoption {
    /// Adopts into `engine` and returns the counts (also in `statistics`).
    @discardableResult
    static func adopt(
        fdStoreFiles: [PassedFileDescriptor],
        cacheFile: CacheFile?,
        maxTokens: Int = .max,
        into engine: TokenEngine,
        rules: SnapshotAdoption,
        notifier: SystemdNotifier,
        statistics: SnapshotStatistics,
        logger: Logger
    ) -> SnapshotAdoption.Counts? {
        let source: String
        // Where the snapshot was: never an access token from a file (``TokenCacheMedium``).
        let medium: TokenCacheMedium
        let snapshots: [CacheSnapshot.Contents]
        if !fdStoreFiles.isEmpty {
            source = "fd_store"
            medium = .memory
            snapshots = CacheHandover.restore(
                from: fdStoreFiles,
                maxTokens: maxTokens,
                notifier: notifier,
                logger: logger
            )
            if let cacheFile {
                logger.info(
                    "the fd store's cache wins; the cache file is not read",
                    metadata: ["file": "\(cacheFile.path)"]
                )
            }
        } else if let cacheFile {
            source = "file"
            medium = .disk
            switch cacheFile.read(maxTokens: maxTokens) {
            case .absent:
                logger.info("no cache file yet: starting cold", metadata: ["file": "\(cacheFile.path)"])
                return nil
            case .refused(let reason):
                logger.warning(
                    "cache file refused: starting cold",
                    metadata: ["file": "\(cacheFile.path)", "reason": "\(reason)"]
                )
                statistics.recordAdoption(SnapshotAdoption.Counts(), from: source)
                return nil
            case .read(let contents):
                snapshots = [contents]
            }
        } else {
            return nil
        }
        var counts = SnapshotAdoption.Counts()
        let now = engine.unixNow.seconds
        for snapshot in snapshots {
            let (tokens, found) = rules.filter(snapshot, now: now)
            let taken = engine.importTokens(tokens, from: medium)
            counts.adopted += taken
            counts.changedProvider += found.changedProvider
            counts.expired += found.expired
            counts.refused += found.refused + (tokens.count - taken)
        }
        statistics.recordAdoption(counts, from: source)
        var metadata: Logger.Metadata = [
            "source": "\(source)", "tokens": "\(counts.adopted)",
            "tokens_of_changed_providers": "\(counts.changedProvider)", "tokens_expired": "\(counts.expired)",
            "tokens_refused": "\(counts.refused)",
        ]
        if let snapshot = snapshots.first {
            metadata["format_version"] = "\(snapshot.formatVersion)"
            metadata["agent_version"] = "\(snapshot.agentVersion ?? "unknown")"
        }
        // Lines past max_entries: counted in tokens_refused, never decoded.
        let pastLimit = snapshots.reduce(0) { $0 + $1.linesPastLimit }
        if pastLimit > 0 { metadata["lines_past_max_entries"] = "\(pastLimit)" }
        if let cacheFile, source == "file" { metadata["file"] = "\(cacheFile.path)" }
        logger.info("cache taken over from the previous process", metadata: metadata)
        return counts
    }
}
