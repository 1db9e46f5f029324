import Testing
import TokenAgent
import TokenWire

/// Readers check tokens by `WireToken`: it must be the agent's own rule.
@Test func theAgentsTokenRuleIsTheOneReadersCheck() {
    #expect(TokenAcceptance.maxTokenBytes == WireToken.maxBytes)
    #expect(AgentConfiguration.longestMaxLifetime == Double(WireToken.maxLifetimeSeconds))
    #expect(WireLimits.maxReplyLineBytes > "OK ".utf8.count + WireToken.maxBytes + " ".utf8.count + 20)
}
