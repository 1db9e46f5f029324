import TokenSegment

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// One part of the client's cache of tokens read from shared memory: a fixed number of places,
/// each holding one copied-out token, under one lock.
///
/// The cache is direct-mapped: a subject has one place, found from ``CacheHash``, and a subject
/// that lands on a taken place replaces what was there. So ids chosen to collide only evict each
/// other (their reads take the segment's keyed lookup), and a hit costs an index and a comparison
/// instead of a dictionary's hashing.
///
/// A place stays valid for as long as its slot's sequence counter keeps the value it had when the
/// token was copied (any change to the slot changes it): a hit compares one word of the segment
/// instead of hashing, probing and copying again. The hit path takes no reference count but the
/// token's own (the reader is held unmanaged; the place owns it), which is what keeps it cheap
/// when every thread of a worker reads the same keys.
final class ReadCacheShard: @unchecked Sendable {
    /// What one place holds. Empty when `reader` is `nil`.
    struct Place {
        var subject = TokenSubject(kind: "", id: "")
        /// The mapping the token was read from, retained by the place.
        var reader: Unmanaged<SegmentReader>?
        var slot = 0
        var sequence: UInt64 = 0
        var expiry: UInt64 = 0
        var lifetime: UInt64 = 0
        var token = Token(jwt: "", expiresAt: .distantPast)
        /// The report interval in which the subject was last recorded for TOUCH.
        var reportedIn = 0
    }

    /// What a look at a subject's place found.
    enum Probe {
        /// The token, unchanged in the segment and with enough validity left.
        case hit(Token)
        /// Unchanged in a usable segment, but without enough validity left: ask the agent.
        case notServable
        /// Not cached, changed since, or the segment is no longer usable: read the segment.
        case unknown
    }

    /// The places in a shard (a power of two).
    static let capacity = 1024

    private let lock: UnsafeMutablePointer<pthread_mutex_t>
    private let places: UnsafeMutablePointer<Place>
    /// Keys read through memory since the last report, by kind (under the lock).
    private var touched: [String: Set<String>] = [:]
    /// Reads from memory answered (counted under the lock the read takes anyway).
    private var answered = 0

    init() {
        lock = .allocate(capacity: 1)
        // Adaptive: a thread that finds the lock taken spins briefly before sleeping, since the
        // holder keeps it for a few dozen nanoseconds (a sleep and a wake-up cost microseconds).
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(lock, &attributes)
        pthread_mutexattr_destroy(&attributes)
        places = .allocate(capacity: Self.capacity)
        places.initialize(repeating: Place(), count: Self.capacity)
    }

    deinit {
        for index in 0..<Self.capacity { places[index].reader?.release() }
        places.deinitialize(count: Self.capacity)
        places.deallocate()
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }

    @inline(__always)
    private func locked<Result>(_ body: () -> Result) -> Result {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return body()
    }

    /// Looks at `subject`'s place (`index`) at `now` (`CLOCK_BOOTTIME` nanoseconds); a hit is
    /// counted, and recorded for TOUCH once per report interval.
    @inline(__always)
    func probe(
        _ subject: TokenSubject,
        at index: Int,
        minimumValidity: Double?,
        now: UInt64,
        reportInterval: Int
    ) -> Probe {
        locked {
            let place = places + index
            guard let reader = place.pointee.reader, place.pointee.subject == subject else { return .unknown }
            return reader._withUnsafeGuaranteedRef { reader -> Probe in
                guard reader.sequence(ofSlot: place.pointee.slot) == place.pointee.sequence,
                    reader.isUsable(now: now)
                else { return .unknown }
                guard
                    reader.isServable(
                        expiry: place.pointee.expiry,
                        lifetime: place.pointee.lifetime,
                        minimumValidity: minimumValidity,
                        now: now
                    )
                else { return .notServable }
                if place.pointee.reportedIn != reportInterval {
                    touched[subject.kind, default: []].insert(subject.id)
                    place.pointee.reportedIn = reportInterval
                }
                answered += 1
                return .hit(place.pointee.token)
            }
        }
    }

    /// Puts a token just copied from `reader` in `subject`'s place (`index`), replacing what
    /// was there, and records the subject for TOUCH.
    ///
    /// `readerIsCurrent` is asked under the shard's lock: a mapping dropped (and forgotten by
    /// ``forget(_:)``) while the token was being copied from it is not put back into a place,
    /// where it would stay mapped until the place is taken by another subject.
    func store(
        _ subject: TokenSubject,
        at index: Int,
        reader: SegmentReader,
        copy: SegmentReader.SlotCopy,
        token: Token,
        reportInterval: Int,
        readerIsCurrent: () -> Bool
    ) {
        let retained = Unmanaged.passRetained(reader)
        let replaced = locked { () -> Unmanaged<SegmentReader>? in
            touched[subject.kind, default: []].insert(subject.id)
            guard readerIsCurrent() else { return retained }
            let replaced = places[index].reader
            places[index] = Place(
                subject: subject,
                reader: retained,
                slot: copy.slot,
                sequence: copy.sequence,
                expiry: copy.expiry,
                lifetime: copy.lifetime,
                token: token,
                reportedIn: reportInterval
            )
            return replaced
        }
        // What the place held, or the reader itself when it was not stored. A mapping's last
        // release unmaps it: outside the lock.
        replaced?.release()
    }

    /// Counts a read from memory answered outside ``probe(_:at:minimumValidity:now:reportInterval:)``.
    func countAnswer() { locked { answered += 1 } }

    /// Empties the places that hold tokens read from `reader` (a mapping being dropped).
    func forget(_ reader: SegmentReader) {
        let released = locked { () -> [Unmanaged<SegmentReader>] in
            var released: [Unmanaged<SegmentReader>] = []
            for index in 0..<Self.capacity
            where places[index].reader?.toOpaque() == Unmanaged.passUnretained(reader).toOpaque() {
                if let held = places[index].reader { released.append(held) }
                places[index] = Place()
            }
            return released
        }
        for held in released { held.release() }
    }

    /// Reads from memory answered so far.
    var answers: Int { locked { answered } }

    /// The keys read through memory since the last call, by kind.
    func takeTouched() -> [String: Set<String>] {
        locked {
            defer { touched = [:] }
            return touched
        }
    }
}
