import NIOCore
import Testing

@testable import TokenAgentServer

/// One peer's answers past its rate wait their turn; another peer's do not.
@Suite struct PeerPacerTests {
    @Test func aBurstIsAnsweredAtOnceAndTheRestWaitTheirTurn() {
        let pacer = PeerPacer(rate: 10)
        // A burst of `rate` is answered at once (the time the calls take only helps).
        for _ in 0..<10 { #expect(pacer.delay(for: 1000) == .zero) }
        _ = pacer.delay(for: 1000)
        // Past it, each waits about 100 ms more than the one before.
        let later = pacer.delay(for: 1000)
        #expect(later > .milliseconds(50) && later <= .milliseconds(200), "\(later)")
        // Another uid, and the unidentified peers, have their own pace.
        #expect(pacer.delay(for: 1001) == .zero)
        #expect(pacer.delay(for: nil) == .zero)
    }
}
