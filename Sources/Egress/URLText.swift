/// Small URL helpers: query and form encoding, and the rule that credentials
/// never travel over plain http except to loopback.
public enum URLText {
    /// Percent-encodes everything but RFC 3986 unreserved characters.
    public static func encodeComponent(_ value: String) -> String {
        if value.utf8.allSatisfy(isUnreserved) { return value }  // the common case: ids and names
        var encoded = ""
        for byte in value.utf8 {
            if isUnreserved(byte) {
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                encoded += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return encoded
    }

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// `name=value&…`, for query strings and `application/x-www-form-urlencoded` bodies.
    public static func form(_ fields: [(String, String)]) -> String {
        fields.map { encodeComponent($0.0) + "=" + encodeComponent($0.1) }.joined(separator: "&")
    }

    /// `url` with `fields` appended to its query.
    public static func appendingQuery(_ url: String, _ fields: [(String, String)]) -> String {
        url + (url.contains("?") ? "&" : "?") + form(fields)
    }

    /// Why `url` may not carry credentials (not http(s), or plain http to a
    /// non-loopback host), or nil when it may.
    public static func insecurityReason(_ url: String) -> String? {
        guard let schemeEnd = url.range(of: "://") else { return "is not an http(s) URL" }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "http" || scheme == "https" else { return "is not an http(s) URL" }
        guard scheme == "http" else { return nil }
        return isLoopback(url) ? nil : "uses plain http to a non-loopback host; credentials would travel in clear text"
    }

    public static func isLoopback(_ url: String) -> Bool {
        guard let authority = url.split(separator: "/", omittingEmptySubsequences: true).dropFirst().first else { return false }
        // After any user:password@.
        let afterScheme = authority.split(separator: "@").last ?? authority
        let host = afterScheme.hasPrefix("[") ? String(afterScheme.prefix { $0 != "]" }.dropFirst())
            : String(afterScheme.split(separator: ":").first ?? "")
        return host == "localhost" || host.hasPrefix("127.") || host == "::1"
    }
}
