import Crypto

/// A short, non-reversible name for a secret, safe to log: never log the token itself.
public enum TokenFingerprint {
    /// The first 12 hex digits of the SHA-256 of `secret`.
    public static func of(_ secret: String) -> String {
        Array(secret.utf8).withUnsafeBytes { of(bytes: $0) }
    }

    /// The first 12 hex digits of the SHA-256 of the secret whose bytes are `bytes`.
    public static func of(bytes: UnsafeRawBufferPointer) -> String {
        let digest = SHA256.hash(data: bytes)
        return digest.prefix(6).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
