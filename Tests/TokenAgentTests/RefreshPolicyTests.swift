import Testing
import TokenAgent

@Suite("Refresh policy")
struct RefreshPolicyTests {
    let policy = RefreshPolicy(refreshMargin: 600, minValidity: 300, idleTimeout: 600)

    @Test func hourLongTokenRefreshesTenMinutesBeforeExpiry() {
        #expect(
            policy.refreshTime(fetchedAt: .init(seconds: 0), expiry: .init(seconds: 3600), jitterUnit: 0).seconds
                == 3000
        )
    }

    @Test func jitterMovesRefreshEarlierByAtMostTenPercent() {
        let latest = policy.refreshTime(fetchedAt: .init(seconds: 0), expiry: .init(seconds: 3600), jitterUnit: 0)
            .seconds
        let earliest = policy.refreshTime(
            fetchedAt: .init(seconds: 0),
            expiry: .init(seconds: 3600),
            jitterUnit: 0.999_999
        ).seconds
        #expect(latest == 3000)
        #expect(abs(earliest - 2700) < 0.01)
        let middle = policy.refreshTime(fetchedAt: .init(seconds: 100), expiry: .init(seconds: 3700), jitterUnit: 0.5)
            .seconds
        #expect(middle == 100 + 3000 - 150)
    }

    @Test func shortLifetimesRefreshAtHalfLife() {
        #expect(
            policy.refreshTime(fetchedAt: .init(seconds: 0), expiry: .init(seconds: 600), jitterUnit: 0).seconds == 300
        )
        #expect(
            policy.refreshTime(fetchedAt: .init(seconds: 10), expiry: .init(seconds: 130), jitterUnit: 0).seconds == 70
        )
    }

    @Test func defaultMinValidityIsCappedAtAQuarterOfTheLifetime() {
        #expect(policy.requiredValidity(lifetime: 3600, requested: nil) == 300)
        #expect(policy.requiredValidity(lifetime: 400, requested: nil) == 100)
        #expect(policy.requiredValidity(lifetime: 20, requested: nil) == 10, "never below the serving floor")
    }

    @Test func explicitMinValidityIsHonoured() {
        #expect(policy.requiredValidity(lifetime: 3600, requested: 1200) == 1200)
        #expect(policy.requiredValidity(lifetime: 3600, requested: 0) == 10)
    }

    @Test func backoffGrowsExponentiallyWithFullJitterUpToSixtySeconds() {
        #expect(policy.backoff(failures: 1, jitterUnit: 0.999) <= 1)
        #expect(policy.backoff(failures: 3, jitterUnit: 0.999) > 3.9)
        #expect(policy.backoff(failures: 3, jitterUnit: 0.999) <= 4)
        #expect(policy.backoff(failures: 7, jitterUnit: 0.999) <= 60)
        #expect(policy.backoff(failures: 7, jitterUnit: 0.999) > 59)
        #expect(policy.backoff(failures: 500, jitterUnit: 0.5) == 30)
        #expect(policy.backoff(failures: 2, jitterUnit: 0) == 0.1, "never zero")
    }

    @Test func servingFloorAndIdleness() {
        #expect(policy.isServable(remaining: 10))
        #expect(!policy.isServable(remaining: 9.99))
        #expect(policy.isActive(lastRead: .init(seconds: 0), now: .init(seconds: 600)))
        #expect(!policy.isActive(lastRead: .init(seconds: 0), now: .init(seconds: 600.01)))
    }
}
