import JSON

/// Compact JWS (RFC 7515) with RS256: building and taking apart.
public enum JWT {
    public struct DecodeError: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// A token split into its parts. The signature is not checked here.
    public struct Parts: Sendable {
        public let header: JSONValue
        public let claims: JSONValue
        public let signingInput: [UInt8]
        public let signature: [UInt8]
    }

    public static func signRS256(headerJSON: String, claimsJSON: String, key: RSAKey) -> String? {
        let signingInput = Base64URL.encode(headerJSON) + "." + Base64URL.encode(claimsJSON)
        guard let signature = key.signSHA256(Array(signingInput.utf8)) else { return nil }
        return signingInput + "." + Base64URL.encode(signature)
    }

    public static func decode(_ token: String) throws(DecodeError) -> Parts {
        let pieces = token.split(separator: ".", omittingEmptySubsequences: false)
        guard pieces.count == 3 else { throw DecodeError(message: "token is not three dot-separated parts") }
        guard let headerBytes = Base64URL.decode(pieces[0]), let claimsBytes = Base64URL.decode(pieces[1]),
            let signature = Base64URL.decode(pieces[2])
        else { throw DecodeError(message: "token part is not base64url") }
        guard let header = try? JSONParser.parse(headerBytes), case .object = header else {
            throw DecodeError(message: "token header is not a JSON object")
        }
        guard let claims = try? JSONParser.parse(claimsBytes), case .object = claims else {
            throw DecodeError(message: "token claims are not a JSON object")
        }
        return Parts(header: header, claims: claims,
                     signingInput: Array(token.utf8.prefix(pieces[0].utf8.count + 1 + pieces[1].utf8.count)),
                     signature: signature)
    }
}
