import Dispatch
import LoopbackPeer
import NIOCore
import Synchronization
import TestSupport
import Testing
import TokenAgentServer

/// The metadata endpoint's user-database answers: a name service that hangs holds up only the
/// uids it has not answered, and each connection waits at most the time-out.
@Suite struct UserCacheTests {
    static func user(_ uid: UInt32) -> KernelPeerResolver.UserCache.Answer {
        .success(UserGroups(uid: uid, primaryGID: uid, groups: [uid]))
    }

    @Test func aHangingLookupTimesOutAndHoldsUpNoOtherUID() async throws {
        let cache = KernelPeerResolver.UserCache(lifetime: .seconds(60), timeout: .milliseconds(300), maxInFlight: 4)
        let release = DispatchSemaphore(value: 0)
        let calls = Mutex([UInt32: Int]())
        let lookup: @Sendable (UInt32) -> KernelPeerResolver.UserCache.Answer = { uid in
            calls.withLock { $0[uid, default: 0] += 1 }
            if uid == 1001 { release.wait() }  // the name service hangs for this one
            return Self.user(uid)
        }
        let hung = try await offPool { cache.answer(for: 1001) { lookup(1001) } }
        guard case .failure(.unanswered(uid: 1001, let reason)) = hung else {
            Issue.record("expected a time-out, got \(hung)")
            return
        }
        #expect(reason == "within 0.3 s")
        // Another uid is answered while the first lookup still hangs.
        let other = try await offPool { cache.answer(for: 1002) { lookup(1002) } }
        #expect(other == Self.user(1002))
        // The hanging uid again: its lookup is not started twice, and its deadline is past.
        let again = try await offPool { cache.answer(for: 1001) { lookup(1001) } }
        guard case .failure(.unanswered) = again else {
            Issue.record("expected no answer yet, got \(again)")
            return
        }
        #expect(calls.withLock { $0[1001] } == 1)
        // The name service answers at last: the next connection has the answer.
        release.signal()
        let answered = await eventually {
            (try? await offPool { cache.answer(for: 1001) { lookup(1001) } }) == Self.user(1001)
        }
        #expect(answered)
        #expect(calls.withLock { $0[1001] } == 1)
    }

    @Test func pastTheLookupsInFlightAConnectionIsUnidentifiedAtOnce() async throws {
        let cache = KernelPeerResolver.UserCache(lifetime: .seconds(60), timeout: .milliseconds(200), maxInFlight: 2)
        let release = DispatchSemaphore(value: 0)
        let hang: @Sendable () -> KernelPeerResolver.UserCache.Answer = {
            release.wait()
            return .failure(.noSuchUser(uid: 0))
        }
        for uid: UInt32 in [1, 2] { _ = try await offPool { cache.answer(for: uid, hang) } }
        let third = try await offPool { cache.answer(for: 3) { Self.user(3) } }
        guard case .failure(.unanswered(uid: 3, let reason)) = third else {
            Issue.record("expected a refusal, got \(third)")
            return
        }
        #expect(reason == "2 lookups already wait for it")
        release.signal()
        release.signal()
        #expect(await eventually { (try? await offPool { cache.answer(for: 3) { Self.user(3) } }) == Self.user(3) })
    }
}
