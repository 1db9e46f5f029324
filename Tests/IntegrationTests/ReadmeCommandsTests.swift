import Foundation
import TestSupport
import Testing
import TokenWire

/// The README's shell blocks (```sh, ```bash, ```console), read from README.md itself and run in
/// order in one bash session, as a reader would in one shell, against a demo agent this test
/// starts (no provider: the embedded demo issuer). The tour's socket and binary directory, the
/// demo's, are replaced by the test agent's socket and the suite's build, so a demo agent started
/// with `scripts/serve-demo` can run beside the suite. The blocks of the offline tour's section
/// run in a session of their own, against the agent and fake-google that `serve-demo --google`
/// runs (ReadmeOfflineTourTests.swift).
///
/// - A block right after `<!-- not run: <why> -->` is skipped and listed; every other block runs,
///   and a command that fails (`bash -e`, `pipefail`) fails the test.
/// - In a block with `$ ` prompts, each `$ ` line is a command and the lines after it, up to the
///   next prompt, are its documented output. Each must match a line of the command's standard
///   output, by shape: `<jwt>` a JWT whose header and payload are JSON, `<access-token>` printable
///   ASCII without spaces, `<unix-expiry>` a Unix time ahead of now and at most 30 days ahead, `<n>`
///   a whole number, `<hex>` hex digits, `…` any text, and a line that is only `…` any number of
///   lines. Everything else is literal. A command documented with no output must print none.
/// - In a block without prompts every line is a command whose output is not checked.
@Suite("README commands")
struct ReadmeCommandsTests {
    struct Step {
        var command: String
        var expected: [String]
        var checked: Bool
        var line: Int
    }

    struct Block {
        var block: DocText.FencedBlock
        var notRun: String?
    }

    static let shellLanguages: Set<String> = ["sh", "bash", "console", "shell"]

    /// The README's shell blocks, with the reason each marked block is not run.
    static func blocks(_ readme: String) -> [Block] {
        let (open, close) = ("<!-- not run: ", " -->")
        return DocText.fencedBlocks(readme).filter { shellLanguages.contains($0.language) }.map { block in
            let marked = block.before.hasPrefix(open) && block.before.hasSuffix(close)
            let reason = String(block.before.dropFirst(open.count).dropLast(close.count))
            return Block(block: block, notRun: marked && !reason.isEmpty ? reason : nil)
        }
    }

    /// A block's commands and their documented output.
    static func steps(_ block: DocText.FencedBlock) -> [Step] {
        var steps: [Step] = []
        let prompted = block.lines.contains { $0.hasPrefix("$ ") }
        var index = 0
        while index < block.lines.count {
            let line = block.lines[index]
            let number = block.line + 1 + index
            index += 1
            if prompted, !line.hasPrefix("$ ") {
                if steps.isEmpty {
                    if !line.trimmingCharacters(in: .whitespaces).isEmpty {
                        steps.append(Step(command: "", expected: [line], checked: true, line: number))
                    }
                } else {
                    steps[steps.count - 1].expected.append(line)
                }
                continue
            }
            var command = prompted ? String(line.dropFirst(2)) : line
            while command.hasSuffix("\\"), index < block.lines.count {
                command += "\n" + block.lines[index]
                index += 1
            }
            let trimmed = command.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            steps.append(Step(command: command, expected: [], checked: prompted, line: number))
        }
        for index in steps.indices {
            while steps[index].expected.last?.trimmingCharacters(in: .whitespaces).isEmpty == true {
                steps[index].expected.removeLast()
            }
        }
        return steps
    }

    /// Whether `output` has the documented shape `pattern`, line by line.
    static func matches(_ pattern: ArraySlice<String>, _ output: ArraySlice<String>) -> Bool {
        guard let first = pattern.first else { return output.isEmpty }
        if first.trimmingCharacters(in: .whitespaces) == "…" {
            return (0...output.count).contains { matches(pattern.dropFirst(), output.dropFirst($0)) }
        }
        guard let line = output.first, lineMatches(first, line) else { return false }
        return matches(pattern.dropFirst(), output.dropFirst())
    }

    private static let placeholders: [String: (pattern: String, check: @Sendable (String) -> Bool)] = [
        "jwt": (
            #"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"#, { jwtPart($0, 0) != nil && jwtPart($0, 1) != nil }
        ),
        "unix-expiry": (
            "[0-9]+",
            { value in
                let now = Date().timeIntervalSince1970
                return Double(value).map { $0 > now && $0 <= now + 30 * 86_400 } ?? false
            }
        ),
        "access-token": ("[!-~]+", { _ in true }),
        "n": ("[0-9]+", { _ in true }),
        "hex": ("[0-9a-f]+", { _ in true }),
    ]

    static func lineMatches(_ pattern: String, _ line: String) -> Bool {
        var regex = "^"
        var checks: [@Sendable (String) -> Bool] = []
        var rest = Substring(pattern.trimmingCharacters(in: .whitespaces))
        while let next = rest.firstIndex(where: { $0 == "…" || $0 == "<" }) {
            regex += NSRegularExpression.escapedPattern(for: String(rest[..<next]))
            if rest[next] == "…" {
                regex += ".*"
                rest = rest[rest.index(after: next)...]
                continue
            }
            let close = rest[next...].firstIndex(of: ">")
            let name = close.map { String(rest[rest.index(after: next)..<$0]) } ?? ""
            guard let close, let placeholder = placeholders[name] else {
                regex += "<"
                rest = rest[rest.index(after: next)...]
                continue
            }
            regex += "(" + placeholder.pattern + ")"
            checks.append(placeholder.check)
            rest = rest[rest.index(after: close)...]
        }
        regex += NSRegularExpression.escapedPattern(for: String(rest)) + "$"
        guard let expression = try? NSRegularExpression(pattern: regex),
            let match = expression.firstMatch(
                in: line,
                range: NSRange(line.startIndex..., in: line)
            )
        else { return false }
        for (index, check) in checks.enumerated() {
            guard let range = Range(match.range(at: index + 1), in: line), check(String(line[range])) else {
                return false
            }
        }
        return true
    }

    /// The socket the README's tour starts the demo agent on (`# socket: …` after
    /// `scripts/serve-demo`), as the README writes it; scripts/serve-demo must default to it.
    static func tourSocketText(_ readme: String) throws -> String {
        let line = try #require(
            readme.components(separatedBy: "\n").first {
                $0.contains("scripts/serve-demo") && $0.contains("# socket: ")
            },
            "README: no `bash scripts/serve-demo   # socket: …` line"
        )
        let text = try #require(line.components(separatedBy: "# socket: ").last?.trimmingCharacters(in: .whitespaces))
        let script = try DocText.read("scripts/serve-demo")
        #expect(
            script.contains("${FLEET_TOKEND_SOCKET:-\(text)}"),
            "scripts/serve-demo's default socket is not \(text)"
        )
        return text
    }

    /// The directory of the binary scripts/serve-demo runs, as the tour's `export PATH=` line
    /// writes it (`$PWD/<dir>`); scripts/serve-demo must run the agent from there.
    static func demoBinariesText(_ readme: String) throws -> String {
        let line = try #require(
            readme.components(separatedBy: "\n").first { $0.contains("export PATH=\"$PWD/") },
            "README: no `export PATH=\"$PWD/…:$PATH\"` line in the tour"
        )
        let text = try #require(
            line.components(separatedBy: "export PATH=\"").last?.components(separatedBy: ":").first
        )
        let directory = String(text.dropFirst("$PWD/".count))
        let script = try DocText.read("scripts/serve-demo")
        #expect(script.contains("exec \(directory)/fleet-tokend serve"), "scripts/serve-demo does not run \(directory)")
        return text
    }

    @Test func theReadmeCommandsRunAgainstTheDemoAgent() async throws {
        let readme = try DocText.read("README.md")
        let offline = try Self.offlineTourLines(readme)
        let blocks = Self.blocks(readme).filter { !offline.contains($0.block.line) }
        for block in blocks where block.notRun != nil {
            let first = block.block.lines.first { !$0.trimmingCharacters(in: .whitespaces).isEmpty } ?? ""
            print("README line \(block.block.line): not run (\(block.notRun ?? "")): \(first)")
        }
        let steps = blocks.filter { $0.notRun == nil }.flatMap { Self.steps($0.block) }
        for step in steps where step.command.isEmpty {
            Issue.record("README line \(step.line): output before any command: \(step.expected)")
        }
        // What the README must show running, so these cannot be marked away.
        for needed in ["UNIX-CONNECT:", "fleet-tokend get ", "fleet-tokend status"] {
            #expect(steps.contains { $0.command.contains(needed) }, "README: no block runs `\(needed)`")
        }
        // SwiftPM inside `swift test` would share (and rebuild) the build directory under the
        // running tests: such a block must be marked, never run.
        for step in steps {
            if let builds = Self.runsSwiftPM(step.command) {
                Issue.record("README line \(step.line): `\(step.command)` runs \(builds): mark its block not run")
                return
            }
        }
        // The tour's socket and binaries are the demo's (scripts/serve-demo): the test runs the
        // same commands against an agent and a build of its own, so a demo agent may run beside it.
        let tourSocket = try Self.tourSocketText(readme)
        let demoBinaries = try Self.demoBinariesText(readme)
        let agent = try await AgentProcess(["--demo"])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let binaries = URL(fileURLWithPath: AgentProcess.binary).deletingLastPathComponent().path
        let substitutions = [(tourSocket, agent.socketPath), (demoBinaries, binaries)]
        for (text, _) in substitutions {
            #expect(steps.contains { $0.command.contains(text) }, "README: no command uses `\(text)`")
        }
        let ownSteps = steps.map { step in
            var step = step
            for (text, replacement) in substitutions {
                step.command = step.command.replacingOccurrences(of: text, with: replacement)
            }
            return step
        }
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let outcome: Result<(Int32, Int), any Error>
        do {
            outcome = .success(try await Self.runSteps(ownSteps, in: directory))
        } catch {
            outcome = .failure(error)
        }
        let status = await agent.stop()
        let (exitStatus, reached) = try outcome.get()
        #expect(status == 0, "agent exit status \(status):\n\(agent.log)")
        Self.check(steps, exitStatus: exitStatus, reached: reached, in: directory, log: "agent log:\n\(agent.log)")
    }

    /// Records an issue for each step before `reached` whose output (in `directory`, as
    /// ``runSteps(_:in:timeout:)`` wrote it) is not its documented shape, and for the step that
    /// failed when bash ended with `exitStatus`, with `log` (what the agent wrote).
    static func check(_ steps: [Step], exitStatus: Int32, reached: Int, in directory: URL, log: String) {
        for (index, step) in steps.enumerated() where index < reached {
            let output =
                (try? String(contentsOf: directory.appendingPathComponent("\(index).out"), encoding: .utf8)) ?? ""
            var lines = output.components(separatedBy: "\n")
            if lines.last == "" { lines.removeLast() }
            if step.checked, !Self.matches(step.expected[...], lines[...]) {
                Issue.record(
                    """
                    README line \(step.line): `\(step.command)` printed
                    \(lines.joined(separator: "\n"))
                    which is not the documented
                    \(step.expected.joined(separator: "\n"))
                    """
                )
            }
        }
        if exitStatus != 0 {
            let failed = reached < steps.count ? steps[reached] : nil
            let stderr =
                (try? String(contentsOf: directory.appendingPathComponent("\(reached).err"), encoding: .utf8)) ?? ""
            Issue.record(
                """
                README line \(failed?.line ?? 0): `\(failed?.command ?? "")` failed with exit status \(exitStatus):
                \(stderr)
                \(log)
                """
            )
        }
    }

    /// What in `command` runs the Swift toolchain's build: `swift` itself, or a script of the
    /// repository that does; `nil` when nothing does.
    static func runsSwiftPM(_ command: String) -> String? {
        let words = command.split(whereSeparator: { " \t\n;|&()'\"".contains($0) }).map(String.init)
        if words.contains(where: { $0 == "swift" || $0 == "swiftc" }) { return "swift" }
        for word in words where word.contains("/") {
            let path = DocText.root().appendingPathComponent(word).path
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            for tool in ["swift build", "swift test", "swift run", "swift package", "swiftc"] where text.contains(tool)
            {
                return "\(word) (\(tool))"
            }
        }
        return nil
    }

    /// Runs every step in one `bash -e` session from the repository root, with the built binary's
    /// directory first on PATH and no `FLEET_TOKEND_SOCKET` (the README sets what it needs), for at
    /// most `timeout` seconds. Returns bash's exit status and the index of the step it reached
    /// (`steps.count` when all ran); step i's output is in `i.out` and `i.err`.
    static func runSteps(_ steps: [Step], in directory: URL, timeout: Int = 60) async throws -> (Int32, Int) {
        var script = "set -e -o pipefail\ncd \(quoted(DocText.root().path))\n"
        for (index, step) in steps.enumerated() {
            let out = quoted(directory.appendingPathComponent("\(index).out").path)
            let err = quoted(directory.appendingPathComponent("\(index).err").path)
            script += "echo \(index) > \(quoted(directory.appendingPathComponent("reached").path))\n"
            script += "{ \(step.command)\n} > \(out) 2> \(err) < /dev/null\n"
        }
        script += "echo \(steps.count) > \(quoted(directory.appendingPathComponent("reached").path))\n"
        let path = directory.appendingPathComponent("readme.sh").path
        try script.write(toFile: path, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["FLEET_TOKEND_SOCKET"] = nil
        let binaries = URL(fileURLWithPath: AgentProcess.binary).deletingLastPathComponent().path
        environment["PATH"] = binaries + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        let result = try await run("/usr/bin/timeout", ["\(timeout)", "/bin/bash", path], environment: environment)
        let reached =
            (try? String(contentsOf: directory.appendingPathComponent("reached"), encoding: .utf8))
            .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 0
        return (result.status, reached)
    }

    private static func quoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// The agent's HELP reply lists TokenWire's verbs, and it knows every one of them.
    @Test func helpRepliesWithTokenWiresVerbs() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let help = try await agent.send("HELP")
        for verb in WireRequest.verbs where verb != "QUIT" {
            let reply = try await agent.send(verb)
            #expect(reply.first?.hasPrefix("ERR bad-request unknown verb") != true, "\(verb)")
        }
        await agent.stop()
        #expect(help == ["OK " + WireRequest.verbs.joined(separator: " ")])
    }
}
