import Crypto

/// A short, non-reversible name for a secret, safe to log: never log the token itself.
public enum TokenFingerprint {
    /// The first 12 hex digits of the SHA-256 of `secret`.
    public static func of(_ secret: String) -> String {
        let digest = SHA256.hash(data: Array(secret.utf8))
        return digest.prefix(6).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
