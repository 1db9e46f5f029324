/// Fixed limits of protocol v1.
public enum WireLimits {
    /// The longest request line accepted, in bytes, not counting the LF.
    public static let maxRequestLineBytes = 4096
    /// The longest reply line a reader accepts, in bytes, not counting the LF (nor a CR before
    /// it): a token reply holds a token of up to ``WireToken/maxBytes`` and its expiry, and every
    /// other reply line is far shorter. A longer line breaks the protocol.
    public static let maxReplyLineBytes = 2 * WireToken.maxBytes
    /// The most bytes a reader accepts in one `METRICS` reply, its lines and LFs counted: the
    /// exposition of a few dozen kinds is tens of KiB.
    public static let maxMetricsReplyBytes = 8 * 1024 * 1024
    /// The longest id, in Unicode scalars.
    public static let maxIDScalars = 64
    /// The longest kind name, in bytes.
    public static let maxKindBytes = 32
    /// The most ids one `WARM` line may name; a line with more gets `bad-request`.
    public static let maxWarmIDs = 64
    /// The largest min-validity a GET may ask for, in seconds (one day).
    public static let maxMinValiditySeconds = 86_400
}
