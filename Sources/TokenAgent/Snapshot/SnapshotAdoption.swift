import Dispatch
import Synchronization
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Which tokens of a snapshot a starting agent may take: those of kinds whose provider is the one
/// that made them, under the rules a fetched token passes (``TokenAcceptance``: printable, a
/// strictly read signed JWT whose kind's claim names the id; the kind's longest lifetime), and with
/// at least the serving floor left by the wall clock now. What a snapshot says is never trusted
/// further than a provider's reply: a token that fails any check is counted and skipped, never
/// served, whatever the file's checksum said.
public struct SnapshotAdoption: Sendable {
    /// How many tokens were taken, and why the others were not.
    public struct Counts: Sendable, Equatable {
        /// Tokens that passed every check (the engine may still decline a few: ``refused``).
        public var adopted = 0
        /// Tokens of a kind no longer configured, or whose provider changed since they were made.
        public var changedProvider = 0
        /// Tokens with less than the serving floor left.
        public var expired = 0
        /// Tokens or lines that failed a check: a malformed line, an id the wire refuses, a token
        /// a provider's reply could not have carried (claims, another id, not printable); and the
        /// lines past what the cache can hold (``CacheSnapshot/Contents/linesPastLimit``), never
        /// decoded.
        public var refused = 0

        /// Creates counts.
        public init(adopted: Int = 0, changedProvider: Int = 0, expired: Int = 0, refused: Int = 0) {
            self.adopted = adopted
            self.changedProvider = changedProvider
            self.expired = expired
            self.refused = refused
        }

        /// Every token the snapshot held, and its malformed lines.
        public var total: Int { adopted + changedProvider + expired + refused }
    }

    /// The digest of each configured kind's provider now (``ProviderSet/Built/digests``).
    public var digests: [String: String]
    /// The checks every token passes (``ProviderSet/Built/acceptance``).
    public var acceptance: TokenAcceptance
    /// The least a token must have left, seconds (the serving floor).
    public var servingFloor: Double
    /// The higher floor of each kind whose provider asks one (``ProviderSet/Built/servingFloors``:
    /// access tokens, 300 s): its tokens with less left count as expired.
    public var servingFloors: [String: Double]

    /// Creates the rules for the providers in force.
    public init(
        digests: [String: String],
        acceptance: TokenAcceptance,
        servingFloor: Double = RefreshPolicy().servingFloor,
        servingFloors: [String: Double] = [:]
    ) {
        self.digests = digests
        self.acceptance = acceptance
        self.servingFloor = servingFloor
        self.servingFloors = servingFloors
    }

    /// The least a token of `kind` must have left, seconds.
    func floor(of kind: String) -> Double {
        guard !servingFloors.isEmpty, let raised = servingFloors[kind] else { return servingFloor }
        return max(servingFloor, raised)
    }

    /// The tokens of `contents` to take at wall time `now` (Unix seconds), each with the expiry
    /// the acceptance gives it (never later than the snapshot's), and the counts. A large
    /// snapshot is checked on every core at once, in slices whose results keep their order: the
    /// start waits for it, and its checks are those of 100,000 fetched tokens.
    public func filter(_ contents: CacheSnapshot.Contents, now: Double) -> (tokens: [CachedToken], counts: Counts) {
        let tokens = contents.tokens
        let slices = min(ProcessInfo.processInfo.activeProcessorCount, tokens.count / Self.tokensPerSlice)
        var taken: [CachedToken] = []
        var counts = Counts(refused: contents.malformedLines + contents.linesPastLimit)
        if slices <= 1 {
            (taken, counts) = filter(tokens[...], providers: contents.providers, now: now, counts: counts)
        } else {
            let results = Mutex<[Int: ([CachedToken], Counts)]>([:])
            DispatchQueue.concurrentPerform(iterations: slices) { slice in
                let range = (tokens.count * slice / slices)..<(tokens.count * (slice + 1) / slices)
                let result = filter(tokens[range], providers: contents.providers, now: now, counts: Counts())
                results.withLock { $0[slice] = result }
            }
            let done = results.withLock { $0 }
            taken.reserveCapacity(tokens.count)
            for slice in 0..<slices {
                guard let (part, found) = done[slice] else { continue }
                taken += part
                counts.changedProvider += found.changedProvider
                counts.expired += found.expired
                counts.refused += found.refused
            }
        }
        counts.adopted = taken.count
        return (taken, counts)
    }

    /// The fewest tokens worth a slice of their own.
    static let tokensPerSlice = 4096

    private func filter(
        _ tokens: ArraySlice<CachedToken>,
        providers: [String: String],
        now: Double,
        counts start: Counts
    ) -> ([CachedToken], Counts) {
        var counts = start
        var taken: [CachedToken] = []
        taken.reserveCapacity(tokens.count)
        for token in tokens {
            guard let digest = digests[token.kind], providers[token.kind] == digest else {
                counts.changedProvider += 1
                continue
            }
            let least = floor(of: token.kind)
            guard Double(token.expiresAt) - now >= least else {
                counts.expired += 1
                continue
            }
            guard TokenIdentifier.problem(kind: token.kind, id: Substring(token.id)) == nil else {
                counts.refused += 1
                continue
            }
            let accepted: FetchedToken
            do {
                accepted = try acceptance.accept(
                    token: token.token,
                    expiresAt: Double(token.expiresAt),
                    for: TokenKey(kind: token.kind, id: token.id),
                    now: now
                )
            } catch {
                counts.refused += 1
                continue
            }
            // The JWT's own `exp` may come sooner than the line said.
            let expiresAt = Int64(accepted.expiresAt.seconds.rounded(.down))
            guard Double(expiresAt) - now >= least else {
                counts.expired += 1
                continue
            }
            taken.append(CachedToken(kind: token.kind, id: token.id, token: token.token, expiresAt: expiresAt))
        }
        return (taken, counts)
    }
}
