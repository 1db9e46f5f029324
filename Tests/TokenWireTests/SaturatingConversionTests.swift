import Testing
import TokenWire

@Suite("Conversions that cannot trap")
struct SaturatingConversionTests {
    @Test func int64ClampsAndTakesNaNAsZero() {
        #expect(Int64(saturating: .nan) == 0)
        #expect(Int64(saturating: .infinity) == .max)
        #expect(Int64(saturating: -.infinity) == .min)
        #expect(Int64(saturating: 1e300) == .max)
        #expect(Int64(saturating: -1e300) == .min)
        #expect(Int64(saturating: 9_223_372_036_854_775_807.0) == .max, "2^63 is out of range")
        #expect(
            Int64(saturating: 9_223_372_036_854_774_784.0) == 9_223_372_036_854_774_784,
            "the largest Double below 2^63"
        )
        #expect(Int64(saturating: -9_223_372_036_854_775_808.0) == .min)
        #expect(Int64(saturating: 1.9) == 1)
        #expect(Int64(saturating: -1.9) == -1)
        #expect(Int(saturating: 1e19) == .max)
    }

    @Test func uint64ClampsAndTakesNegativesAsZero() {
        #expect(UInt64(saturating: .nan) == 0)
        #expect(UInt64(saturating: -1) == 0)
        #expect(UInt64(saturating: -.infinity) == 0)
        #expect(UInt64(saturating: .infinity) == .max)
        #expect(UInt64(saturating: 18_446_744_073_709_551_615.0) == .max, "2^64 is out of range")
        #expect(UInt64(saturating: 18_446_744_073_709_549_568.0) == 18_446_744_073_709_549_568)
        #expect(UInt64(saturatingNanoseconds: 1.5) == 1_500_000_000)
        #expect(UInt64(saturatingNanoseconds: 253_402_300_799_000) == .max, "year 9999 in milliseconds, as seconds")
        #expect(UInt64(saturatingNanoseconds: -3) == 0)
    }
}
