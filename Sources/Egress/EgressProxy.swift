import Foundation

/// The proxy HTTPS traffic leaves through, from `HTTPS_PROXY` and `NO_PROXY` as
/// curl and Google's client libraries read them: hosts in `NO_PROXY` are reached
/// directly, every other https URL through an HTTP CONNECT tunnel. Plain http (only
/// ever to loopback) is never proxied.
public struct EgressProxy: Sendable, Equatable {
    public struct Server: Sendable, Equatable {
        public let host: String
        public let port: Int
        /// Basic credentials from the URL's `user:password@`; a secret, never logged.
        public let credentials: (user: String, password: String)?

        public static func == (lhs: Server, rhs: Server) -> Bool {
            lhs.host == rhs.host && lhs.port == rhs.port && lhs.credentials?.user == rhs.credentials?.user
                && lhs.credentials?.password == rhs.credentials?.password
        }

        /// `host:port`, for logs.
        public var address: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    public let server: Server?
    private let exclusions: [String]

    public static let none = EgressProxy(server: nil, exclusions: [])

    public init(server: Server?, exclusions: [String]) {
        self.server = server
        self.exclusions = exclusions.map { $0.lowercased() }
    }

    /// Reads `HTTPS_PROXY`/`https_proxy` and `NO_PROXY`/`no_proxy`. A malformed proxy URL
    /// throws an error that never repeats the URL (it may hold a password).
    public static func from(environment: [String: String]) throws -> EgressProxy {
        let proxyURL = (environment["HTTPS_PROXY"] ?? environment["https_proxy"]).flatMap { $0.isEmpty ? nil : $0 }
        let noProxy = environment["NO_PROXY"] ?? environment["no_proxy"] ?? ""
        let exclusions = noProxy.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return EgressProxy(server: try proxyURL.map(parseServer), exclusions: exclusions)
    }

    /// The proxy for an https request to `host`, or nil to connect directly.
    public func server(forHost host: String) -> Server? {
        guard let server else { return nil }
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return exclusions.contains { Self.excludes($0, host: host) } ? nil : server
    }

    /// curl's `NO_PROXY` rules: `*` matches everything; a name matches itself and its
    /// subdomains (with or without a leading dot); an address matches itself; an IPv4
    /// `address/bits` matches its network. A `:port` suffix is ignored.
    static func excludes(_ entry: String, host: String) -> Bool {
        if entry == "*" { return true }
        if let slash = entry.firstIndex(of: "/") {
            return IPv4Network(address: String(entry[..<slash]), bits: Int(entry[entry.index(after: slash)...]))?
                .contains(host) ?? false
        }
        var name = entry
        if name.hasPrefix("["), let close = name.firstIndex(of: "]") {
            name = String(name[name.index(after: name.startIndex)..<close])
        } else if name.filter({ $0 == ":" }).count == 1, let colon = name.firstIndex(of: ":") {
            name = String(name[..<colon])
        }
        if name.hasPrefix(".") { name.removeFirst() }
        return host == name || host.hasSuffix("." + name)
    }

    private static func parseServer(_ url: String) throws -> Server {
        let problem = EgressError("HTTPS_PROXY must look like http://[user:password@]host:port")
        var rest = Substring(url)
        if let schemeEnd = rest.range(of: "://") {
            guard rest[..<schemeEnd.lowerBound].lowercased() == "http" else {
                throw EgressError("HTTPS_PROXY: only http:// proxies are supported (the tunnel to the target is TLS)")
            }
            rest = rest[schemeEnd.upperBound...]
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        var credentials: (String, String)?
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            credentials = (String(parts[0]).removingPercentEncoding ?? String(parts[0]),
                           parts.count == 2 ? (String(parts[1]).removingPercentEncoding ?? String(parts[1])) : "")
            rest = rest[rest.index(after: at)...]
        }
        let host: String
        var portText: Substring?
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() }
        } else {
            let parts = rest.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = String(parts[0])
            if parts.count == 2 { portText = parts[1] }
        }
        guard !host.isEmpty else { throw problem }
        let port = portText.map { Int($0) } ?? 80
        guard let port, (1...65535).contains(port) else { throw problem }
        return Server(host: host, port: port, credentials: credentials)
    }
}

/// An IPv4 network in `NO_PROXY` (`10.0.0.0/8`), as Kubernetes users list cluster ranges.
struct IPv4Network {
    let network: UInt32
    let mask: UInt32

    init?(address: String, bits: Int?) {
        guard let bits, (0...32).contains(bits), let value = Self.parse(address) else { return nil }
        mask = bits == 0 ? 0 : UInt32.max << (32 - bits)
        network = value & mask
    }

    func contains(_ host: String) -> Bool {
        Self.parse(host).map { $0 & mask == network } ?? false
    }

    static func parse(_ text: String) -> UInt32? {
        let octets = text.split(separator: ".", omittingEmptySubsequences: false).compactMap { UInt8($0) }
        guard octets.count == 4, text.split(separator: ".", omittingEmptySubsequences: false).count == 4 else { return nil }
        return octets.reduce(0) { $0 << 8 | UInt32($1) }
    }
}

public struct EgressError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
