/// Tells a step of the wall clock from its drift, by watching the distance between the wall clock
/// and the monotonic one: NTP slews a clock by at most 500 ppm (half a millisecond a second),
/// while a step (NTP correcting a clock that was minutes off, an operator's `date -s`, a VM
/// resumed) moves that distance at once.
struct WallClockWatch {
    /// A change of the distance between two looks larger than this is a step.
    static let stepThreshold = 2.0

    /// The wall clock's distance from the monotonic one at the last look.
    private var distance: Double?

    /// Looks at both clocks: the step since the last look, in seconds (forward is positive), or
    /// `nil` when there was none (or this is the first look).
    mutating func step(now: MonotonicInstant, wall: UnixTime) -> Double? {
        let current = wall.seconds - now.seconds
        defer { distance = current }
        guard let distance, abs(current - distance) > Self.stepThreshold else { return nil }
        return current - distance
    }
}
