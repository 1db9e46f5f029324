import FakeGoogle
import Foundation
import Testing

/// The fake's metadata server, as the benchmarks rely on it (`fake-google --metadata-latency-ms`).
@Suite("Fake metadata server")
struct FakeMetadataTests {
    private static let tokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"

    @Test func answersTheTokenPathAfterItsLatency() async throws {
        try await withFake { fake in
            fake.setMetadataLatency(milliseconds: 40...60)
            for _ in 0..<3 {
                let started = Date()
                let reply = try await httpExchange(
                    "http://\(fake.metadataHost)\(Self.tokenPath)",
                    headers: [("Metadata-Flavor", "Google")]
                )
                #expect(Date().timeIntervalSince(started) >= 0.04)
                #expect(reply.status == 200)
                let json = try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any]
                #expect((json?["access_token"] as? String)?.hasPrefix("ya29.") == true)
            }
            #expect(fake.metadataRequests.map(\.status) == [200, 200, 200])
        }
    }
}
