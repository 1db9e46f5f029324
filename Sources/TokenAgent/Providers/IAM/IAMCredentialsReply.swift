import TokenWire

/// A 200 reply of an IAM Credentials method (`signJwt`'s `{"keyId", "signedJwt"}`,
/// `generateAccessToken`'s `{"accessToken", "expireTime"}`), read as every JSON body from outside
/// the agent is (``StrictJSON/object(bytes:)``): one JSON object in which no object, at any depth,
/// gives a name twice (which of two values counts depends on the reader). The one reading of the
/// reply's string fields for ``SignJWTReply`` and ``GenerateAccessTokenReply``, which check what
/// the strings say; other members are Google's to add and are ignored.
///
/// Every fault is the method's (``IAMCredentialsCall/Method/fault(_:)``): `IAM signJwt reply is
/// not a JSON object`, `... reply gives signedJwt twice`, `... reply has no keyId string`.
struct IAMCredentialsReply {
    /// The method that replied.
    let method: IAMCredentialsCall.Method
    private let object: StrictJSON.Object

    /// Reads `body`, the reply of `method`.
    init(body: [UInt8], method: IAMCredentialsCall.Method) throws(ProviderError) {
        self.method = method
        object = try StrictJSON.object(
            bytes: body,
            repeated: { method.fault("reply gives \($0.printable) twice") },
            notAnObject: { method.fault("reply is not a JSON object") }
        )
    }

    /// The string member `name`.
    func string(_ name: String) throws(ProviderError) -> String {
        guard case .string(let value)? = object[name] else { throw method.fault("reply has no \(name) string") }
        return value
    }
}
