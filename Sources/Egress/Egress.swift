import AsyncHTTPClient
import Foundation
import NIOCore
import NIOExtras
import NIOSSL
import Synchronization

/// How the relay's HTTPS clients reach Fleet Engine and the signers' services:
/// certificate verification always on, with extra trust anchors from `--ca-file`;
/// egress through `HTTPS_PROXY` unless `NO_PROXY` names the host; HTTP/2 or HTTP/1.1.
public struct Egress: Sendable {
    public enum HTTPVersion: String, Sendable, CaseIterable {
        /// HTTP/2 where TLS negotiates it (ALPN), else HTTP/1.1.
        case automatic = "auto"
        case http1 = "1.1"
        /// HTTP/2 required: an answer over HTTP/1.1 is a configuration error.
        case http2 = "2"
    }

    public var httpVersion: HTTPVersion
    public var proxy: EgressProxy
    /// The `--ca-file`s, for logs.
    public let caFiles: [String]
    private let additionalTrustRoots: [NIOSSLCertificate]

    /// The system's trust store only, no proxy, protocol negotiated.
    public static let standard = Egress(httpVersion: .automatic, proxy: .none, caFiles: [], additionalTrustRoots: [])

    private init(httpVersion: HTTPVersion, proxy: EgressProxy, caFiles: [String], additionalTrustRoots: [NIOSSLCertificate]) {
        self.httpVersion = httpVersion
        self.proxy = proxy
        self.caFiles = caFiles
        self.additionalTrustRoots = additionalTrustRoots
    }

    /// Loads every CA file now, so that a bad one stops startup instead of failing each request.
    public static func load(caFiles: [String], httpVersion: HTTPVersion = .automatic,
                            proxy: EgressProxy = .none) throws -> Egress {
        var roots: [NIOSSLCertificate] = []
        for file in caFiles {
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(file)
            } catch {
                throw EgressError("--ca-file \(file): cannot be read as PEM certificates (\(error))")
            }
            guard !certificates.isEmpty else { throw EgressError("--ca-file \(file) holds no PEM certificate") }
            roots += certificates
        }
        return Egress(httpVersion: httpVersion, proxy: proxy, caFiles: caFiles, additionalTrustRoots: roots)
    }

    /// AsyncHTTPClient's configuration for requests to `url`'s host; `base` carries the
    /// caller's pool and timeout settings.
    public func clientConfiguration(for url: String, base: HTTPClient.Configuration = .init()) -> HTTPClient.Configuration {
        var configuration = base
        configuration.tlsConfiguration = tlsConfiguration()
        configuration.httpVersion = httpVersion == .http1 ? .http1Only : .automatic
        if let server = proxyServer(for: url) {
            configuration.proxy = .server(host: server.host, port: server.port,
                                          authorization: server.credentials.map { .basic(username: $0.user, password: $0.password) })
        }
        return configuration
    }

    /// The relay's own HTTP/2 transport's TLS: the same verification, offering `alpn`.
    func tlsContext(alpn: [String]) throws -> NIOSSLContext {
        var tls = tlsConfiguration()
        tls.applicationProtocols = alpn
        return try NIOSSLContext(configuration: tls)
    }

    private func tlsConfiguration() -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if !additionalTrustRoots.isEmpty { tls.additionalTrustRoots = [.certificates(additionalTrustRoots)] }
        return tls
    }

    /// The proxy requests to `url` leave through: https only, unless `NO_PROXY` names the host.
    public func proxyServer(for url: String) -> EgressProxy.Server? {
        guard let (scheme, host) = Self.schemeAndHost(url), scheme == "https" else { return nil }
        return proxy.server(forHost: host)
    }

    static func schemeAndHost(_ url: String) -> (scheme: String, host: String)? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        var authority = url[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            return (scheme, String(authority[authority.index(after: authority.startIndex)..<close]))
        }
        return (scheme, String(authority.prefix { $0 != ":" }))
    }
}

/// Why a request failed below HTTP, in words an operator can act on.
public struct TransportFailure: Error, Sendable {
    /// Why, named as the `cause` label of the retry counters.
    public enum Cause: String, Sendable, CaseIterable {
        /// The certificate or the handshake.
        case tls
        case proxy
        case timeout
        case connection
        /// The server would not speak the HTTP version asked for.
        case httpVersion = "http_version"

        /// Whether the configuration must mend it (a CA file, a proxy, an HTTP version), not time.
        public var isConfiguration: Bool { self == .tls || self == .proxy || self == .httpVersion }
    }

    public let cause: Cause
    public let message: String

    public init(cause: Cause, message: String) {
        self.cause = cause
        self.message = message
    }

    public static func describe(_ error: any Error) -> TransportFailure {
        if let error = error as? ExchangeError {
            switch error {
            case .timedOut, .connectTimedOut: return TransportFailure(cause: .timeout, message: error.description)
            default: break
            }
            return TransportFailure(cause: .connection, message: error.description)
        }
        if error is NIOHTTP1ProxyConnectHandler.Error {
            return TransportFailure(cause: .proxy, message: "the HTTPS proxy refused the tunnel (\(error))")
        }
        if case .connectTimeout(let timeout) = error as? ChannelError {
            return TransportFailure(cause: .timeout, message: "connecting timed out after \(timeout.nanoseconds / 1_000_000_000) s")
        }
        if let error = error as? HTTPClientError {
            if error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
                return TransportFailure(cause: .timeout, message: "\(error)")
            }
            if error == .tlsHandshakeTimeout { return TransportFailure(cause: .tls, message: "TLS handshake timed out") }
            if error == .proxyAuthenticationRequired || error == .invalidProxyResponse || error == .httpProxyHandshakeTimeout {
                return TransportFailure(cause: .proxy, message: "the HTTPS proxy refused the tunnel (\(error))")
            }
        }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            return TransportFailure(cause: .tls, message: tlsReason(error))
        }
        return TransportFailure(cause: .connection, message: "\(error)")
    }

    /// BoringSSL's reason code (`CERTIFICATE_VERIFY_FAILED`) with what it means, instead of
    /// the error's full text with its source paths.
    static func tlsReason(_ error: any Error) -> String {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "TLS: the server's certificate does not name the host the URL names"
        }
        let text = "\(error)"
        let codes = text.split(separator: "OPENSSL_internal:").dropFirst().map { $0.prefix { $0.isUppercase || $0 == "_" || $0.isNumber } }
        guard let code = codes.first.map(String.init), !code.isEmpty else { return "TLS failed: \(text.prefix(200))" }
        switch code {
        case "CERTIFICATE_VERIFY_FAILED":
            return "TLS: certificate verify failed (CERTIFICATE_VERIFY_FAILED): the server's certificate does not chain to a trusted CA; add that CA with --ca-file"
        case "WRONG_VERSION_NUMBER":
            return "TLS: the server did not answer with TLS (WRONG_VERSION_NUMBER): is the URL's scheme right?"
        default:
            return "TLS handshake failed (\(code))"
        }
    }
}

extension Egress {
    /// A client for light traffic (signers, the Schema Registry) that lives as long as the
    /// process and needs no shutdown: AsyncHTTPClient's shared one for the standard egress,
    /// else one per egress (trust anchors, proxy) and per proxied-or-direct.
    public func sharedHTTPClient(for url: String) -> HTTPClient {
        ProcessClients.client(for: url, egress: self)
    }
}

/// HTTP clients that live as long as the process, one per egress, per proxied-or-direct and
/// per pool setting: they need no shutdown, however many parts of the process use them.
enum ProcessClients {
    private static let clients = Mutex<[(key: String, client: HTTPClient)]>([])

    /// - Parameter pool: connections per host and the connect timeout, when not async-http-client's defaults.
    static func client(for url: String, egress: Egress, pool: (connectionsPerHost: Int, connectTimeout: TimeAmount)? = nil) -> HTTPClient {
        guard !egress.caFiles.isEmpty || egress.proxy.server != nil || pool != nil else { return HTTPClient.shared }
        let key = [egress.caFiles.joined(separator: "\n"), egress.proxyServer(for: url)?.address ?? "direct", egress.httpVersion.rawValue,
                   pool.map { "\($0.connectionsPerHost) \($0.connectTimeout.nanoseconds)" } ?? "default"].joined(separator: "|")
        return clients.withLock { clients in
            if let existing = clients.first(where: { $0.key == key }) { return existing.client }
            var base = HTTPClient.Configuration()
            if let pool {
                base.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, pool.connectionsPerHost))
                base.timeout = .init(connect: pool.connectTimeout)
            }
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup,
                                    configuration: egress.clientConfiguration(for: url, base: base))
            clients.append((key, client))
            return client
        }
    }
}
