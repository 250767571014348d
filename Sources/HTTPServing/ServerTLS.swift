import NIOSSL
import Synchronization

/// A server certificate and key for HTTPS, offering HTTP/2 and HTTP/1.1 through ALPN.
public struct ServerTLS: Sendable {
    let configuration: TLSConfiguration

    /// Loads a PEM certificate chain (leaf first) and its PEM private key.
    public static func load(certificateFile: String, keyFile: String) throws -> ServerTLS {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateFile)
        } catch {
            throw ServerTLSError("cannot read the certificate \(certificateFile): \(error)")
        }
        guard !chain.isEmpty else { throw ServerTLSError("\(certificateFile) holds no PEM certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyFile, format: .pem)
        } catch {
            // Never the key's text: only which file failed.
            throw ServerTLSError("cannot read the private key \(keyFile) (PEM expected)")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.applicationProtocols = ["h2", "http/1.1"]
        return ServerTLS(configuration: configuration)
    }
}

public struct ServerTLSError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// How the HTTP/2 connection layer behaves, including faults Google's front ends produce.
public struct HTTP2ServerBehaviour: Sendable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients (Google's front ends say 100).
    public var maximumConcurrentStreams: Int
    /// Send GOAWAY after every this many requests of one connection, then close it once its
    /// streams finished, as a front end does when it drains a connection.
    public var goAwayEveryRequests: Int?
    /// Share (0–1) of requests answered with RST_STREAM instead of a response (nothing applied).
    public var resetShare: Double

    public init(maximumConcurrentStreams: Int = 100, goAwayEveryRequests: Int? = nil, resetShare: Double = 0) {
        self.maximumConcurrentStreams = maximumConcurrentStreams
        self.goAwayEveryRequests = goAwayEveryRequests
        self.resetShare = resetShare
    }
}

/// What the server saw at the connection layer: tests prove a fault really happened.
public final class HTTPServerStatistics: Sendable {
    public struct Counts: Sendable {
        public var connections = 0
        public var http1Requests = 0
        public var http2Requests = 0
        public var goAwaysSent = 0
        public var streamsReset = 0
    }

    private let counts = Mutex(Counts())

    public var current: Counts { counts.withLock { $0 } }

    func count(_ field: WritableKeyPath<Counts, Int>) {
        counts.withLock { $0[keyPath: field] += 1 }
    }
}
