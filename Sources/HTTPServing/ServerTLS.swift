import NIOSSL

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

    /// The same certificate offering only HTTP/1.1 by ALPN, as an HTTPS server without HTTP/2.
    public func withoutHTTP2() -> ServerTLS {
        var configuration = configuration
        configuration.applicationProtocols = ["http/1.1"]
        return ServerTLS(configuration: configuration)
    }
}

public struct ServerTLSError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
