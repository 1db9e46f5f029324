/// Fixed limits of protocol v1.
public enum WireLimits {
    /// The longest request line accepted, in bytes, not counting the LF.
    public static let maxRequestLineBytes = 4096
    /// The longest id, in Unicode scalars.
    public static let maxIDScalars = 64
    /// The longest kind name, in bytes.
    public static let maxKindBytes = 32
    /// The largest min-validity a GET may ask for, in seconds (one day).
    public static let maxMinValiditySeconds = 86_400
}
