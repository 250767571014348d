import CRSAShim

/// An RSA key in the system's libcrypto, for RS256 signing and verification.
/// Immutable after creation and safe to share across threads.
public final class RSAKey: @unchecked Sendable {  // an immutable EVP_PKEY; libcrypto allows concurrent use
    private let key: OpaquePointer

    /// Parses a PEM private key (PKCS#8 or PKCS#1). The PEM text is not retained.
    public init?(privateKeyPEM: String) {
        var pem = Array(privateKeyPEM.utf8)
        defer { for index in pem.indices { pem[index] = 0 } }  // do not leave key material in freed memory
        guard let key = pem.withUnsafeBufferPointer({ buffer in
            buffer.withMemoryRebound(to: CChar.self) { fr_rsa_private_key_from_pem($0.baseAddress, $0.count) }
        }) else { return nil }
        self.key = key
    }

    public init?(publicKeyPEM: String) {
        let pem = Array(publicKeyPEM.utf8)
        guard let key = pem.withUnsafeBufferPointer({ buffer in
            buffer.withMemoryRebound(to: CChar.self) { fr_rsa_public_key_from_pem($0.baseAddress, $0.count) }
        }) else { return nil }
        self.key = key
    }

    deinit {
        fr_rsa_key_free(key)
    }

    public var bits: Int { Int(fr_rsa_key_bits(key)) }

    /// RSASSA-PKCS1-v1_5 with SHA-256.
    public func signSHA256(_ data: [UInt8]) -> [UInt8]? {
        var signature = [UInt8](repeating: 0, count: fr_rsa_signature_size(key))
        var length = signature.count
        let ok = data.withUnsafeBufferPointer { input in
            signature.withUnsafeMutableBufferPointer { output in
                fr_rsa_sign_sha256(key, input.baseAddress, input.count, output.baseAddress, &length)
            }
        }
        guard ok == 1 else { return nil }
        return Array(signature.prefix(length))
    }

    public func verifySHA256(_ data: [UInt8], signature: [UInt8]) -> Bool {
        data.withUnsafeBufferPointer { input in
            signature.withUnsafeBufferPointer { sig in
                fr_rsa_verify_sha256(key, input.baseAddress, input.count, sig.baseAddress, sig.count) == 1
            }
        }
    }

    /// The public half as a SubjectPublicKeyInfo PEM.
    public var publicKeyPEM: String {
        var length = 0
        guard let pem = fr_rsa_public_pem(key, &length) else { return "" }
        defer { fr_free(pem) }
        return String(cString: pem)
    }

    /// A fresh private key as PKCS#8 PEM, for demos and tests.
    public static func generatePrivateKeyPEM(bits: Int = 2048) -> String? {
        var length = 0
        guard let pem = fr_rsa_generate_pkcs8_pem(Int32(bits), &length) else { return nil }
        defer { fr_free(pem) }
        return String(cString: pem)
    }
}
