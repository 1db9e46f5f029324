import Testing
import TokenWire

@Suite("Agent defaults")
struct AgentDefaultsTests {
    @Test func socketPathFromTheEnvironment() {
        #expect(AgentDefaults.socketPath(environment: [:]) == "/run/fleet-tokend/tokens.sock")
        #expect(AgentDefaults.socketPath(environment: ["FLEET_TOKEND_SOCKET": ""]) == AgentDefaults.socketPath)
        #expect(AgentDefaults.socketPath(environment: ["FLEET_TOKEND_SOCKET": "/tmp/a.sock"]) == "/tmp/a.sock")
        #expect(AgentDefaults.socketEnvironmentVariable == "FLEET_TOKEND_SOCKET")
    }
}
