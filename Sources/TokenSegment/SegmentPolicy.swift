/// The agent's serving rule, as the segment's header carries it.
public struct SegmentPolicy: Sendable, Equatable {
    public var minValidityNanoseconds: UInt64
    public var servingFloorNanoseconds: UInt64
    public var idleTimeoutNanoseconds: UInt64

    /// A rule from seconds: the default minimum validity, the serving floor and the idle time-out.
    public init(minValidity: Double, servingFloor: Double, idleTimeout: Double) {
        minValidityNanoseconds = UInt64(max(0, minValidity) * 1e9)
        servingFloorNanoseconds = UInt64(max(0, servingFloor) * 1e9)
        idleTimeoutNanoseconds = UInt64(max(0, idleTimeout) * 1e9)
    }
}
