import ArgumentParser
import FleetTokenClient

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fleet-tokend get KIND ID [MIN-VALIDITY]`: asks the running agent for a token and prints just
/// the token. The minimum validity goes where the protocol's GET has it, or after `--min-validity`.
/// `get access NAME` prints an access token, for `Authorization: Bearer $(fleet-tokend get access
/// NAME)`.
struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Print a token from the running agent.",
        discussion:
            "Exit status: 0 ok, 65 bad input or an invalid reply, 69 unavailable, busy, agent unreachable or no reply in time, 77 denied or rejected."
    )

    @Argument(help: "Token kind (vehicle, trip, ...), or access for an access token.")
    var kind: String

    @Argument(help: "Vehicle id, trip id, ..., or the access token's name (get access fleet-admin).")
    var id: String

    @Argument(help: "Minimum validity in seconds, as in the protocol's GET (or --min-validity).")
    var minimumValidity: Int?

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Option(help: "Minimum validity in seconds (default: the agent's).")
    var minValidity: Int?

    mutating func validate() throws {
        if let minimumValidity, let minValidity, minimumValidity != minValidity {
            throw ValidationError("Minimum validity given twice: \(minimumValidity) and --min-validity \(minValidity).")
        }
    }

    func run() async throws {
        let minValidity = minValidity ?? minimumValidity
        var configuration = FleetTokenClient.Configuration()
        configuration.memoization = false
        // One request and out: mapping a segment would only cost a round trip more.
        configuration.sharedMemory = false
        let client = FleetTokenClient(
            socketPath: socket ?? FleetTokenClient.defaultSocketPath,
            configuration: configuration
        )
        do {
            let token = try await client.token(.kind(kind, id), minimumValidity: minValidity.map(TimeInterval.init))
            print(token.jwt)
        } catch {
            // The error may hold the agent's text: escaped, like everything printed to a terminal.
            StandardError.write("fleet-tokend: \(TerminalText.escaped(error.description))\n")
            throw ExitCode(Self.exitStatus(for: error))
        }
    }

    /// The sysexits-style status for each error.
    static func exitStatus(for error: FleetTokenError) -> Int32 {
        switch error {
        case .badRequest, .invalidReply: return 65  // EX_DATAERR
        case .denied, .rejected: return 77  // EX_NOPERM
        case .unavailable, .busy, .agentUnreachable, .timedOut: return 69  // EX_UNAVAILABLE
        }
    }
}
