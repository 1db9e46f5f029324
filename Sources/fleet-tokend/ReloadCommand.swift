import ArgumentParser
import Foundation

/// `fleet-tokend reload --pid PID`: asks a running agent to reload (SIGHUP). The service unit's
/// `ExecReload=` uses it, so the package needs no `kill` binary.
struct ReloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Ask the running agent to re-read its configuration (sends SIGHUP)."
    )

    @Option(help: "The agent's process id ($MAINPID in the unit).")
    var pid: Int32

    func run() throws {
        guard pid > 1, kill(pid, SIGHUP) == 0 else {
            FileHandle.standardError.write(Data("fleet-tokend: cannot signal process \(pid)\n".utf8))
            throw ExitCode(1)
        }
    }
}
