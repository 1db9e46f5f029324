import TokenWire

/// The checks every fetched token passes before it is cached, whatever provider made it.
public struct TokenAcceptance: Sendable {
    /// The longest token accepted, in bytes: the longest any reader takes (``WireToken/maxBytes``).
    public static let maxTokenBytes = WireToken.maxBytes
    /// The longest a token is kept when its kind sets no `max_lifetime`: a day, seconds.
    public static let defaultMaxLifetime: Double = 86_400

    /// The `authorization` claim name for each kind (`vehicle` -> `vehicleid`).
    public var claimNames: [String: String]
    /// The kinds whose tokens may hold `*` in their `authorization` claim, or lack the kind's
    /// own entry (a provider's `accept_wildcard`).
    public var wildcardKinds: Set<String>
    /// The longest lifetime of each kind's tokens, seconds; an expiry further ahead is brought
    /// back to it. Kinds not listed have ``defaultMaxLifetime``.
    public var maxLifetimes: [String: Double]

    /// Creates the checks with a claim name per kind.
    public init(
        claimNames: [String: String] = FleetEngineKinds.claimNames,
        wildcardKinds: Set<String> = [],
        maxLifetimes: [String: Double] = [:]
    ) {
        self.claimNames = claimNames
        self.wildcardKinds = wildcardKinds
        self.maxLifetimes = maxLifetimes
    }

    /// The longest lifetime `kind`'s tokens are kept for, seconds.
    public func maxLifetime(of kind: String) -> Double { maxLifetimes[kind] ?? Self.defaultMaxLifetime }

    /// Checks `candidate` for `key` at wall time `now` and returns the token with its final expiry:
    ///
    /// - The token is 1 to 16 KiB of printable ASCII without spaces.
    /// - A token of three dot-separated parts whose header or payload a lenient reader decodes to
    ///   text starting with `{` (``JWTClaims/mayReadAsObject(_:)``) is a signed JWT (JWS): its
    ///   header must be strict unpadded base64url (``StrictBase64URL``: no `+`, `/` or `=`) of a
    ///   strict-JSON object (``StrictJSON``), no member twice, whose `alg` is a string other than
    ///   `none` (in any case), else the reply fails. Other tokens with dots (`ya29.a0Af.x`) are
    ///   opaque. The provider is the operator's own service and may sign as it likes, but an
    ///   unsigned token, or one whose header readers may read differently, is never served.
    /// - For a JWT, the payload is read strictly (``JWTClaims``, through ``StrictBase64URL``; a
    ///   payload only a lenient reader decodes makes the token a refusal): a claim given twice or
    ///   an `exp` that is not a finite number, or a number past a Double's range in any claim,
    ///   fails the reply; an `authorization` claim that is not an
    ///   object of distinct string entries, holds `*` in any entry, lacks the kind's entry (when
    ///   the kind has one) or names another id makes the token a refusal of this id
    ///   (``ProviderError/rejected(_:)``), unless the kind accepts wildcards.
    /// - The expiry is the earlier of `expiresAt` (the reply's) and the JWT's `exp`. A value that
    ///   is not finite fails the reply, one at or before `now` is an expired token, and one more
    ///   than the kind's ``maxLifetime(of:)`` ahead is brought back to `now` plus that lifetime.
    ///
    /// Every failure names the token by its fingerprint, never by its text.
    public func accept(token: String, expiresAt: Double?, for key: TokenKey, now: Double) throws -> FetchedToken {
        guard !token.isEmpty, token.utf8.count <= Self.maxTokenBytes,
            token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw ProviderError.failed("token is empty, too long, or not printable ASCII")
        }
        if let expiresAt, !expiresAt.isFinite {
            throw ProviderError.failed("the reply's expiry is not a finite number")
        }
        var expiry = expiresAt
        if let problem = Self.headerProblem(token) {
            throw ProviderError.failed("token's header \(problem) (token \(TokenFingerprint.of(token)))")
        }
        if let claims = JWTClaims(token: token) {
            if let problem = claims.problem {
                throw ProviderError.failed(
                    "token's claims are ambiguous: \(problem) (token \(TokenFingerprint.of(token)))"
                )
            }
            if let problem = authorizationProblem(claims.authorization, for: key) {
                throw ProviderError.rejected("token's \(problem) (token \(TokenFingerprint.of(token)))")
            }
            if let exp = claims.expiresAt { expiry = min(expiry ?? exp, exp) }
        } else if JWTClaims.looksLikeJWT(token) {
            // Fail closed: a JWT whose claims this reader cannot read strictly (deeper than 32
            // levels, a lone surrogate, a trailing comma) may still be read by Fleet Engine.
            throw ProviderError.rejected("token's claims cannot be read strictly (token \(TokenFingerprint.of(token)))")
        }
        guard let expiry else { throw ProviderError.failed("no expiry in the reply and the token has no exp") }
        guard expiry > now else { throw ProviderError.failed("token is already expired") }
        return FetchedToken(token: token, expiresAtUnixSeconds: min(expiry, now + maxLifetime(of: key.kind)))
    }

    /// What makes the header of `token` unfit, when `token` is a signed JWT (three parts, its
    /// header or payload an object); `nil` when it fits or `token` is opaque.
    static func headerProblem(_ token: String) -> String? {
        let parts = JWTClaims.dotParts(token)
        guard parts.count == 3 else { return nil }
        guard JWTClaims.mayReadAsObject(parts[0]) || JWTClaims.mayReadAsObject(parts[1]) else { return nil }
        guard let bytes = StrictBase64URL.decode(parts[0]) else {
            return "is not strict base64url (unpadded, without +, / or =)"
        }
        guard let header = StrictJSON(bytes: bytes)?.members else {
            return "is not a strict-JSON object"
        }
        var names: Set<[UInt8]> = []
        for member in header where !names.insert(Array(member.name.utf8)).inserted {
            return "gives \(JWTClaims.printable(member.name)) twice"
        }
        guard let alg = header.first(where: { $0.name.utf8.elementsEqual("alg".utf8) }) else { return "has no alg" }
        guard case .string(let name) = alg.value else { return "has an alg that is not a string" }
        guard !JWTClaims.lowercasedASCII(name).utf8.elementsEqual("none".utf8) else {
            return "says alg \(JWTClaims.printable(name)): the token is not signed"
        }
        return nil
    }

    /// What makes `authorization` unfit for a token of `key`, or `nil` when it fits.
    private func authorizationProblem(_ authorization: JWTClaims.Authorization, for key: TokenKey) -> String? {
        let wildcards = wildcardKinds.contains(key.kind)
        let claim = claimNames[key.kind]
        switch authorization {
        case .ambiguous(let why):
            return "authorization claim is ambiguous: \(why)"
        case .absent:
            guard let claim, !wildcards else { return nil }
            return "authorization claim has no \(claim) entry"
        case .entries(let entries):
            if !wildcards, let name = entries.filter({ $0.value == "*" }).keys.min() {
                return "authorization claim holds the wildcard * in \(JWTClaims.printable(name))"
            }
            guard let claim else { return nil }
            guard let named = entries[claim] else {
                return wildcards ? nil : "authorization claim has no \(claim) entry"
            }
            if wildcards, named == "*" { return nil }
            guard named.utf8.elementsEqual(key.id.utf8) else { return "\(claim) claim names another id" }
            return nil
        }
    }
}
