import Dispatch
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension FleetTokenClient {
    /// A token for `subject`, for code that is not async: blocks the calling thread until the
    /// answer comes. Never call it from a Swift concurrency task or an event loop. A remembered
    /// token is returned at once, without blocking.
    public func blockingToken(_ subject: TokenSubject, minimumValidity: TimeInterval? = nil) throws(FleetTokenError)
        -> Token
    {
        if let token = remembered(subject, minimumValidity: minimumValidity) { return token }
        let outcome = Mutex<Result<Token, FleetTokenError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<Token, FleetTokenError>
            do {
                result = .success(try await token(subject, minimumValidity: minimumValidity))
            } catch let error as FleetTokenError {
                result = .failure(error)
            } catch {
                result = .failure(.unavailable("\(error)"))
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }
}

/// What the Driver and Consumer SDKs hand a token fetcher: the vehicle or trip a token is for.
public struct AuthorizationContext: Sendable, Hashable {
    /// The vehicle id (Driver SDK).
    public var vehicleID: String?
    /// The trip id (Consumer SDK).
    public var tripID: String?

    /// Creates a context.
    public init(vehicleID: String? = nil, tripID: String? = nil) {
        self.vehicleID = vehicleID
        self.tripID = tripID
    }
}

/// A callback-style token fetcher shaped like the SDK samples' `fetchToken(with:completion:)`, so
/// code written against them ports with a couple of lines.
///
/// ```swift
/// let fetcher = FleetTokenFetcher(client: client)
/// fetcher.fetchToken(with: AuthorizationContext(vehicleID: "v-1")) { token, error in … }
/// ```
public final class FleetTokenFetcher: Sendable {
    /// The client asked.
    public let client: FleetTokenClient
    /// The queue completions run on.
    public let queue: DispatchQueue

    /// Creates a fetcher over `client` that calls back on `queue`.
    public init(client: FleetTokenClient, queue: DispatchQueue = .main) {
        self.client = client
        self.queue = queue
    }

    /// Fetches the vehicle token when the context names a vehicle, else the trip token, and calls
    /// `completion` on ``queue`` with the JWT or the error (a ``FleetTokenError``).
    public func fetchToken(
        with authorizationContext: AuthorizationContext?,
        completion: @escaping @Sendable (String?, (any Error)?) -> Void
    ) {
        let subject: TokenSubject
        if let vehicleID = authorizationContext?.vehicleID {
            subject = .vehicle(vehicleID)
        } else if let tripID = authorizationContext?.tripID {
            subject = .trip(tripID)
        } else {
            queue.async { completion(nil, FleetTokenError.badRequest("missing authorization context")) }
            return
        }
        let client = self.client
        let queue = self.queue
        if let token = client.remembered(subject, minimumValidity: nil) {
            queue.async { completion(token.jwt, nil) }
            return
        }
        Task {
            do {
                let token = try await client.token(subject)
                queue.async { completion(token.jwt, nil) }
            } catch {
                queue.async { completion(nil, error) }
            }
        }
    }
}
