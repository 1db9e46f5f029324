import ArgumentParser
import TokenAgentServer

/// `fleet-tokend prepare-directories`: gives the socket directory, and the state directory, to the
/// agent's uid. Kubernetes' init container runs it from the agent's own image (which has no shell
/// and no `chown`), as root with only `CAP_CHOWN`, on the hostPath directories the kubelet made
/// `0755 root:root`: the agent then binds its socket there as its own uid. ``AgentDirectory`` says
/// what it checks and how it changes them.
struct PrepareDirectoriesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prepare-directories",
        abstract: "Give the socket and state directories to the agent's uid (a Kubernetes init container's step).",
        discussion:
            "Run as root with CAP_CHOWN (nothing else is needed) before the agent starts. The socket directory becomes 2750 USER:SOCKET-GROUP (the socket's group may reach it, the set-group-ID bit gives the socket that group), the state directory 0700 USER:GROUP; a missing one is created. A symbolic link, a file, or a directory another uid than root and USER owns in a directory's place is refused; so is, run as root, a symbolic link on the way or a directory on the way that is not root's (USER's included) or that group or others may write without the sticky bit; and two directories that are one, or one in the other, on the file system (by device and inode). Safe to run again. Exit status: 0 both prepared; 1 one was refused after looking at the file system, or could not be changed (the message says why); 64 bad arguments (their text alone)."
    )

    @Option(help: "The agent's uid, a number: the owner of both directories.")
    var user: UInt32

    @Option(help: "The agent's gid, a number: the state directory's group.")
    var group: UInt32

    @Option(help: "The socket's directory, an absolute path (the directory of the agent's socket).")
    var socketDirectory: String

    @Option(help: "The socket's group, a number (the config's socket_group): the socket directory's group.")
    var socketGroup: UInt32

    @Option(help: "The agent's state directory, an absolute path apart from the socket directory (default: none).")
    var stateDirectory: String?

    func validate() throws {
        // (uid_t)-1 and (gid_t)-1 mean "leave it" to chown.
        for (name, id) in [("--user", user), ("--group", group), ("--socket-group", socketGroup)] where id == .max {
            throw ValidationError("\(name) \(id) is not an id")
        }
        for path in [socketDirectory] + (stateDirectory.map { [$0] } ?? []) {
            let parts = path.split(separator: "/")
            guard path.hasPrefix("/"), !parts.isEmpty, !parts.contains("."), !parts.contains("..") else {
                throw ValidationError("\(path) must be an absolute path below /, without . or .. in it")
            }
        }
        if let stateDirectory {
            let socket = Self.components(socketDirectory)
            let state = Self.components(stateDirectory)
            // Apart: workers mount the socket directory, and must never see the agent's state.
            guard !state.starts(with: socket), !socket.starts(with: state) else {
                throw ValidationError(
                    "the state directory must be apart from the socket directory, not in it or above it"
                )
            }
        }
    }

    func run() throws {
        var directories = [AgentDirectory.socketDirectory(socketDirectory, owner: user, group: socketGroup)]
        if let stateDirectory {
            directories.append(AgentDirectory.stateDirectory(stateDirectory, owner: user, group: group))
        }
        // Apart on the file system too, by device and inode (a bind mount, a link): before anything
        // is changed. A directory that cannot be located is refused below, with the reason.
        if directories.count == 2, let apart = try? directories[0].isApart(from: directories[1]), !apart {
            StandardError.write(
                "fleet-tokend: \(TerminalText.escaped("state directory \(directories[1].path) and socket directory \(directories[0].path) are the same directory, or one is in the other, on the file system (by device and inode): workers must never see the agent's state; nothing was changed"))\n"
            )
            throw ExitCode(1)
        }
        var failed = false
        for directory in directories {
            do {
                let outcome = try directory.prepare()
                let what: String
                switch outcome {
                case .created: what = "created, \(directory.wanted)"
                case .changed(let from): what = "was \(from), now \(directory.wanted)"
                case .unchanged: what = "already \(directory.wanted)"
                }
                print("\(directory.label) \(TerminalText.escaped(directory.path)): \(what)")
            } catch {
                StandardError.write("fleet-tokend: \(TerminalText.escaped(String(describing: error)))\n")
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }

    private static func components(_ path: String) -> [Substring] {
        path.split(separator: "/")
    }
}
