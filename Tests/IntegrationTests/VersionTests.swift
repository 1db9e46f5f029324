import Foundation
import TestSupport
import Testing
import TokenWire

/// What is running: one version, written once (`FleetTokendVersion`), reported by the binary,
/// the socket, the metrics and `status`, and taken by the packaging.
@Suite("The version")
struct VersionTests {
    /// `0.1.0 (commit 0123456789ab)`, `-dirty` after the commit when tracked files differ from it.
    private static var described: Regex<(Substring, version: Substring, commit: Substring, Substring?)> {
        #/^fleet-tokend (?<version>[0-9]+\.[0-9]+\.[0-9]+) \(commit (?<commit>[0-9a-f]{12}(-dirty)?)\)\n$/#
    }

    @Test func theBinaryNamesItsVersionAndCommit() async throws {
        let result = try await run(AgentProcess.binary, ["--version"])
        #expect(result.status == 0)
        let match = try #require(try Self.described.wholeMatch(in: result.stdout), "\(result.stdout)")
        #expect(String(match.version) == FleetTokendVersion.version)
        let head = try await run("/usr/bin/git", ["-C", DocText.root().path, "rev-parse", "--short=12", "HEAD"])
        #expect(String(match.commit).hasPrefix(head.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    @Test func theAgentReportsItOnTheSocketInMetricsStatusAndItsLog() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { Task { await agent.stop() } }
        let reply = try #require(try await agent.send("STATS").first)
        #expect(WireReply.statsFields(String(reply.dropFirst(3)))["version"] == FleetTokendVersion.version)
        let samples = MetricsText.samples(try await agent.metricsText().split(separator: "\n"))
        let info = try #require(samples.first { $0.name == "fleet_tokend_build_info" })
        #expect(info.value == 1)
        #expect(info.labels["version"] == FleetTokendVersion.version)
        #expect(info.labels["commit"]?.count ?? 0 >= 12)
        let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(status.stdout.contains("\nversion:   \(FleetTokendVersion.version)\n"), "\(status.stdout)")
        #expect(agent.log.contains("fleet-tokend starting"))
        #expect(agent.log.contains("version=\(FleetTokendVersion.version)"), "\(agent.log.prefix(600))")
    }

    /// The .deb, the image and e2e-containers read it through packaging/version; the manifests'
    /// image tag is the same (scripts/check-manifests checks it too).
    @Test func thePackagingTakesItFromTheCode() async throws {
        let printed = try await run("/bin/bash", [DocText.root().path + "/packaging/version"])
        #expect(printed.status == 0)
        #expect(printed.stdout == FleetTokendVersion.version + "\n")
        let daemonSet = try DocText.read("packaging/kubernetes/daemonset.yaml")
        #expect(daemonSet.contains("image: localhost/fleet-tokend:\(FleetTokendVersion.version)\n"))
        let changelog = try DocText.read("CHANGELOG.md").components(separatedBy: "\n")
        #expect(changelog.first { $0.hasPrefix("## ") } == "## \(FleetTokendVersion.version)", "CHANGELOG's top entry")
        for script in ["packaging/build-deb", "packaging/build-image", "scripts/e2e-containers"] {
            #expect(try DocText.read(script).contains("version=$(bash packaging/version)"), "\(script)")
        }
    }
}
