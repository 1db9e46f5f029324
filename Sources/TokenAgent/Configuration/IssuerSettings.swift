/// The settings of one kind's issuer (`issuers.<kind>`): the agent mints the kind's tokens itself,
/// signed with a service-account key file or, key-less, through the IAM Credentials API as a
/// service account.
public struct IssuerSettings: Sendable, Hashable, Codable {
    /// A Google service-account JSON key; a relative path is looked up in `$CREDENTIALS_DIRECTORY`.
    public var keyFile: String?
    /// A service account's email: tokens are signed key-less by IAM Credentials `signJwt` as it,
    /// authorized by the host's credentials.
    public var serviceAccount: String?
    /// The lifetime of the kind's tokens, seconds (60 to 3600; default `issuer_lifetime`).
    public var lifetime: Double?
    /// For a kind Fleet Engine does not know by name: the `authorization` entry its tokens carry
    /// (`{<claim>: <id>}`).
    public var claim: String?
    /// The most signatures a minute this issuer makes (default: unbounded for a key file,
    /// ``IssuerSettings/defaultSignsPerMinute`` for a service account).
    public var signsPerMinute: Double?

    /// The default budget of a key-less issuer: 600 signatures a minute, a hundredth of a project's
    /// IAM Credentials quota (60,000 a minute), so a hundred hosts fit.
    public static let defaultSignsPerMinute = 600

    /// Creates settings for a key-less issuer signing as `serviceAccount`.
    public init(serviceAccount: String) { self.serviceAccount = serviceAccount }

    /// Creates settings for an issuer signing with the key in `keyFile`.
    public init(keyFile: String) { self.keyFile = keyFile }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case keyFile = "key_file"
        case serviceAccount = "service_account"
        case lifetime
        case claim
        case signsPerMinute = "signs_per_minute"
    }
}
