import Testing
import TokenAgent
import TokenWire

/// Readers check tokens by `WireToken` (the segment header's bounds), which the agent's own rule
/// takes: a reply line holds the longest token it accepts.
@Test func aReplyLineHoldsTheLongestTokenTheAgentAccepts() {
    #expect(WireLimits.maxReplyLineBytes > "OK ".utf8.count + TokenAcceptance.maxTokenBytes + " ".utf8.count + 20)
}
