import MetadataEndpoint
import Synchronization

/// The address listened on, for whoever waits for it.
final class ListeningAddress: Sendable {
    private let state = Mutex<
        (
            address: Result<MetadataListenAddress, any Error>?,
            waiting: [CheckedContinuation<MetadataListenAddress, any Error>]
        )
    >((nil, []))

    func set(_ address: MetadataListenAddress) { finish(.success(address)) }

    func fail(_ error: any Error) { finish(.failure(error)) }

    private func finish(_ result: Result<MetadataListenAddress, any Error>) {
        let waiting = state.withLock { state -> [CheckedContinuation<MetadataListenAddress, any Error>] in
            guard state.address == nil else { return [] }
            state.address = result
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume(with: result) }
    }

    func wait() async throws -> MetadataListenAddress {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<MetadataListenAddress, any Error>? in
                if let address = state.address { return address }
                state.waiting.append(continuation)
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
