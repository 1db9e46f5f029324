// An example worker: links only FleetTokenClient, asks the host's fleet-tokend for a vehicle
// token and a trip token, and shows the callback adapter the SDK samples port to.
//
//   swift run token-worker-example v-1 t-1      (with the agent running; see README)
import Dispatch
import FleetTokenClient

let arguments = CommandLine.arguments.dropFirst()
let vehicleID = arguments.first ?? "v-1"
let tripID = arguments.dropFirst().first ?? "t-1"
let client = FleetTokenClient()

do {
    let vehicle = try await client.token(.vehicle(vehicleID))
    print("vehicle \(vehicleID): \(vehicle.jwt.prefix(24))… expires \(vehicle.expiresAt)")
    let trip = try await client.token(.trip(tripID), minimumValidity: 600)
    print("trip \(tripID): \(trip.jwt.prefix(24))… expires \(trip.expiresAt)")
} catch {
    print("token failed: \(error)")
}

// Code written against the SDK samples' fetchToken(with:completion:) keeps its shape.
let fetcher = FleetTokenFetcher(client: client, queue: DispatchQueue(label: "worker"))
let done = DispatchSemaphore(value: 0)
fetcher.fetchToken(with: AuthorizationContext(vehicleID: vehicleID)) { token, error in
    print(token.map { "callback got \($0.prefix(24))…" } ?? "callback error: \(error!)")
    done.signal()
}
await withCheckedContinuation { continuation in
    DispatchQueue.global().async {
        done.wait()
        continuation.resume()
    }
}
