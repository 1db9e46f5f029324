/// Conversions from `Double` that cannot trap. Swift's `Int64(_:)` and `UInt64(_:)` stop the
/// process on NaN, infinity or a value out of range; a time, a size or a count that came from
/// outside (a provider's reply, a JWT, a segment, a config file) goes through these instead, so a
/// hostile value becomes a bounded one, never a crash.
extension Int64 {
    /// `value` rounded towards zero and clamped to `Int64.min...Int64.max`; NaN is 0.
    @inlinable
    public init(saturating value: Double) {
        if value.isNaN {
            self = 0
        } else if value >= 9_223_372_036_854_775_807.0 {
            // 2^63 is the nearest Double to Int64.max and is already out of range.
            self = .max
        } else if value <= -9_223_372_036_854_775_808.0 {
            self = .min
        } else {
            self = Int64(value)
        }
    }
}

extension UInt64 {
    /// `value` rounded towards zero and clamped to `0...UInt64.max`; NaN and negatives are 0.
    @inlinable
    public init(saturating value: Double) {
        if !(value > 0) {
            self = 0
        } else if value >= 18_446_744_073_709_551_615.0 {
            // 2^64 is the nearest Double to UInt64.max and is already out of range.
            self = .max
        } else {
            self = UInt64(value)
        }
    }

    /// `seconds` as nanoseconds, clamped to `0...UInt64.max`; NaN and negatives are 0.
    @inlinable
    public init(saturatingNanoseconds seconds: Double) {
        self.init(saturating: seconds * 1e9)
    }
}

extension Int {
    /// `value` rounded towards zero and clamped to `Int.min...Int.max`; NaN is 0.
    @inlinable
    public init(saturating value: Double) {
        self = Int(Int64(saturating: value))
    }
}
