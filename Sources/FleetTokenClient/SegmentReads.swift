import CSharedMemory
import Dispatch
import Foundation
import Synchronization
import TokenSegment
import TokenWire

/// The client's shared-memory read path: per kind, the agent's segment mapped read-only, read
/// with no system call; and the keys read that way, reported to the agent (`TOUCH`) off the read
/// path so it keeps refreshing them (docs/SHM.md).
final class SegmentReads: Sendable {
    private enum Mapping {
        /// Being asked for; callers use the socket meanwhile.
        case asking
        case mapped(SegmentReader)
        /// Not offered (off, denied, busy, or unreadable): asked again after the instant.
        case unavailable(until: UInt64)
    }

    private struct State {
        var mappings: [String: Mapping] = [:]
        /// Keys read through memory since the last report, by kind.
        var touched: [String: Set<String>] = [:]
        var reporting = false
    }

    private let state = Mutex(State())
    private let reads = Atomic(0)
    /// How long a kind that was not offered waits before it is asked for again.
    static let retryAfterRefusal: UInt64 = 30_000_000_000

    /// Tokens answered from shared memory.
    var hits: Int { reads.load(ordering: .relaxed) }

    /// What a lookup in shared memory decided.
    enum Answer {
        case token(Token)
        /// Ask the agent over the socket (the memo may answer: the kind has no segment).
        case socket
        /// The segment has no token for the key with enough validity: ask the agent, not the memo.
        case miss
        /// Ask the agent for the kind's segment first (then look again, or use the socket).
        case askForSegment
    }

    /// The token for `subject` from the kind's segment, when it holds one with enough validity.
    func lookup(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Answer {
        let now = fsm_boottime_ns()
        let mapping = state.withLock { state -> Mapping? in
            switch state.mappings[subject.kind] {
            case nil:
                state.mappings[subject.kind] = .asking
                return nil
            case .unavailable(let until) where now >= until:
                state.mappings[subject.kind] = .asking
                return nil
            case let mapping?: return mapping
            }
        }
        guard let mapping else { return .askForSegment }
        guard case .mapped(let reader) = mapping else { return .socket }
        switch reader.lookup(id: subject.id, minimumValidity: minimumValidity, now: now) {
        case .hit(let jwt, let unixExpiry):
            reads.add(1, ordering: .relaxed)
            state.withLock { _ = $0.touched[subject.kind, default: []].insert(subject.id) }
            return .token(Token(jwt: jwt, expiresAt: Date(timeIntervalSince1970: TimeInterval(unixExpiry))))
        case .miss:
            return .miss
        case .unusable:
            // Retired (ask again: the agent has a newer one) or stale (the agent is gone; asking
            // again finds the next one, or fails and waits).
            state.withLock { state in
                if case .mapped(let current) = state.mappings[subject.kind], current === reader {
                    state.mappings[subject.kind] = nil
                }
            }
            return .socket
        }
    }

    /// Records the agent's answer to `SHM <kind>`: maps the segment (closing `descriptor`), or
    /// notes that the kind is not offered for a while.
    func received(kind: String, reply: WireReply?, descriptor: Int32?) {
        defer { if let descriptor { close(descriptor) } }
        var mapping = Mapping.unavailable(until: fsm_boottime_ns() + Self.retryAfterRefusal)
        if case .ok(let text)? = reply, let descriptor {
            let fields = WireReply.statsFields(text)
            if fields["layout"] == String(SegmentLayout.version), let size = fields["size"].flatMap(Int.init),
                let reader = try? SegmentReader(descriptor: descriptor, expectedSize: size, kind: kind)
            {
                mapping = .mapped(reader)
            }
        }
        state.withLock { $0.mappings[kind] = mapping }
    }

    /// Whether `kind` has a mapped segment (then the memo is not used for it).
    func isMapped(_ kind: String) -> Bool {
        state.withLock { state in
            if case .mapped = state.mappings[kind] { return true }
            return false
        }
    }

    /// How often keys read through memory are reported: a quarter of the agent's idle time-out,
    /// 1 to 60 s.
    var reportInterval: Double {
        state.withLock { state in
            var idle = Double.infinity
            for case .mapped(let reader) in state.mappings.values {
                idle = min(idle, Double(reader.idleTimeoutNanoseconds) / 1e9)
            }
            return min(60, max(1, idle / 4))
        }
    }

    /// The keys read through memory since the last call, as TOUCH requests that fit a line.
    func takeTouches() -> [WireRequest] {
        state.withLock { state in
            var requests: [WireRequest] = []
            for (kind, ids) in state.touched {
                var batch: [String] = []
                var length = "TOUCH \(kind)".utf8.count
                for id in ids {
                    if length + 1 + id.utf8.count > WireLimits.maxRequestLineBytes, !batch.isEmpty {
                        requests.append(.touch(kind: kind, ids: batch))
                        batch = []
                        length = "TOUCH \(kind)".utf8.count
                    }
                    batch.append(id)
                    length += 1 + id.utf8.count
                }
                if !batch.isEmpty { requests.append(.touch(kind: kind, ids: batch)) }
            }
            state.touched = [:]
            return requests
        }
    }

    /// Starts the reporter when none runs; `false` when one does.
    func claimReporter() -> Bool {
        state.withLock { state in
            if state.reporting { return false }
            state.reporting = true
            return true
        }
    }
}
