/// A vehicle token as `TokenCache` keeps it, one per active vehicle. A JWT's payload and
/// signature are kept decoded from base64url (three quarters of their text: 460 instead of
/// 610 bytes for an RS256 vehicle token) and its header, the same for every token of a signer,
/// is shared; the text is rebuilt for each use, about a microsecond. A token that is not three
/// base64url parts (a token service may hand out anything) is kept as it came.
struct StoredToken {
    private enum Form {
        case jwt(header: String, decoded: [UInt8], payloadCount: Int)
        case text(String)
    }

    private var form: Form
    /// Expiry in seconds since the epoch.
    let expiresAt: Int64

    /// - Parameter sharedHeader: a header kept already; used instead of a copy when the token's is the same.
    init(_ token: VehicleToken, sharedHeader: String?) {
        expiresAt = token.expiresAt
        let parts = token.token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(Substring(parts[1])),
              let signature = Base64URL.decode(Substring(parts[2])),
              Base64URL.encodedCount(payload.count) == parts[1].count,
              Base64URL.encodedCount(signature.count) == parts[2].count else {
            form = .text(token.token)
            return
        }
        let header = Substring(parts[0])
        form = .jwt(header: sharedHeader.map { $0 == header ? $0 : String(header) } ?? String(header),
                    decoded: payload + signature, payloadCount: payload.count)
        // Base64url text with stray bits in its last character decodes, but re-encodes otherwise.
        if text != token.token { form = .text(token.token) }
    }

    /// The header, for the next token to share.
    var header: String? {
        if case .jwt(let header, _, _) = form { return header }
        return nil
    }

    /// The token as issued.
    var text: String {
        switch form {
        case .text(let text):
            return text
        case .jwt(let header, let decoded, let payloadCount):
            let signatureCount = decoded.count - payloadCount
            let length = header.utf8.count + 2 + Base64URL.encodedCount(payloadCount) + Base64URL.encodedCount(signatureCount)
            return String(unsafeUninitializedCapacity: length) { output in
                var written = output.initialize(fromContentsOf: header.utf8)
                output[written] = UInt8(ascii: ".")
                written += 1
                written += Base64URL.encode(decoded[..<payloadCount], into: UnsafeMutableBufferPointer(rebasing: output[written...]))
                output[written] = UInt8(ascii: ".")
                written += 1
                written += Base64URL.encode(decoded[payloadCount...], into: UnsafeMutableBufferPointer(rebasing: output[written...]))
                return written
            }
        }
    }
}
