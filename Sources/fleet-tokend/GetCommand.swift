import ArgumentParser
import Foundation
import TokenAgent
import TokenWire

/// `fleet-tokend get KIND ID`: asks the running agent for a token and prints just the token.
struct GetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Print a token from the running agent.",
        discussion: "Exit status: 0 ok, 65 bad input, 69 unavailable or agent unreachable, 77 denied or rejected."
    )

    @Argument(help: "Token kind (vehicle, trip, ...).")
    var kind: String

    @Argument(help: "Vehicle id, trip id, ...")
    var id: String

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Option(help: "Minimum validity in seconds (default: the agent's).")
    var minValidity: Int?

    func run() throws {
        let path =
            socket ?? AgentConfiguration(environment: ProcessInfo.processInfo.environment).socketPath
        let request = WireRequest.get(kind: kind, id: id, minValiditySeconds: minValidity)
        // Check locally first so bad input never reaches the agent.
        if case .failure(let error) = RequestParser.parse(text: request.line) {
            fail("\(error.code.rawValue): \(error.message)", status: 65)
        }
        let line: String
        do {
            line = try UnixLineExchange.exchange(request.line, path: path)
        } catch {
            fail("agent unreachable at \(path): \(error)", status: 69)
        }
        switch WireReply.parse(Substring(line)) {
        case .token(let token, _):
            print(token)
        case .error(let error):
            let status: Int32
            switch error.code {
            case .badRequest, .badKind, .badID: status = 65
            case .denied, .rejected: status = 77
            case .unavailable, .busy: status = 69
            }
            fail("\(error.code.rawValue): \(error.message)", status: status)
        default:
            fail("unexpected reply from the agent", status: 69)
        }
    }

    private func fail(_ message: String, status: Int32) -> Never {
        FileHandle.standardError.write(Data("fleet-tokend: \(message)\n".utf8))
        Foundation.exit(status)
    }
}
