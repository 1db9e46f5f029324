import Foundation
import Testing

/// `fleet-tokend check-config`: the whole configuration checked as `serve` and a reload check it,
/// its files read, nothing started.
@Suite("check-config")
struct CheckConfigTests {
    private func write(_ json: String) throws -> String {
        let path = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("config.json").path
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func aGoodConfigurationPrintsWhatItServes() async throws {
        let path = try write(
            #"{"providers": {"vehicle": {"url": "http://127.0.0.1:1/v/{id}"}}, "allow": {"vehicle": {"users": [0]}}, "admin": {"groups": [0]}}"#
        )
        let result = try await run(AgentProcess.binary, ["check-config", "--config", path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.hasPrefix("configuration OK: \(path)\nkinds:\n"), "\(result.stdout)")
        #expect(
            result.stdout.contains("  vehicle           http http://127.0.0.1:1/v/ID; allowed: users [0] groups []\n")
        )
        #expect(result.stdout.contains("admin:     users [] groups [0]\n"))
        #expect(!result.stdout.contains("trip"), "only the kinds it serves")
    }

    @Test func theDemoIsNamed() async throws {
        let result = try await run(AgentProcess.binary, ["check-config", "--config", try write(#"{"demo": true}"#)])
        #expect(result.status == 0)
        #expect(result.stdout.contains("demo issuer: Fleet Engine refuses its tokens\n"))
        #expect(result.stdout.contains("  trip "))
    }

    /// A bad value, a file it names that is not there, a misspelt kind in the rules, nothing to
    /// serve: 78, naming the key, as `serve` and a reload would refuse them.
    @Test(arguments: [
        (#"{"demo": true, "max_entries": 0}"#, "configuration key max_entries: must be at least 1"),
        (
            #"{"providers": {"vehicle": {"url": "http://127.0.0.1:1/{id}", "headers_file": "/nonexistent/h"}}}"#,
            "configuration key providers.vehicle.headers_file: cannot read /nonexistent/h"
        ),
        (#"{"demo": true, "allow": {"vehicles": {"users": [0]}}}"#, "configuration key allow.vehicles:"),
        ("{}", "configuration key providers: nothing to serve"),
        (#"{"demo": true, "demo": false}"#, "configuration key demo: appears twice"),
    ])
    func aBadConfigurationIsRefusedNamingTheKey(json: String, message: String) async throws {
        let result = try await run(AgentProcess.binary, ["check-config", "--config", try write(json)])
        #expect(result.status == 78, "\(result)")
        #expect(result.stderr.hasPrefix("fleet-tokend: \(message)"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }
}
