import CRSAShim
import CThrowawayCA
import Foundation
import HTTPServing

/// A throwaway certificate authority and a server certificate it signed, for HTTPS in
/// tests and the demo: the relay trusts the CA through `--ca-file`, the emulator serves
/// the certificate. The CA's key is never kept, so the CA can sign nothing else.
public struct ThrowawayTLS: Sendable {
    public static let caFileName = "ca.pem"
    public static let certificateFileName = "server.pem"
    public static let keyFileName = "server-key.pem"

    public let directory: String

    public var caFile: String { directory + "/" + Self.caFileName }
    public var certificateFile: String { directory + "/" + Self.certificateFileName }
    public var keyFile: String { directory + "/" + Self.keyFileName }

    /// Writes `ca.pem`, `server.pem` and `server-key.pem` (mode 0600) into `directory`,
    /// creating it. The server certificate names `localhost`, 127.0.0.1, ::1 and `hosts`.
    public static func generate(in directory: String, hosts: [String] = []) throws -> ThrowawayTLS {
        try generate(in: directory, issuedFor: ["localhost", "127.0.0.1", "::1"] + hosts)
    }

    /// The same with a server certificate naming only `names`: a certificate from a trusted CA
    /// that was issued for another host than the one a client asks for.
    public static func generate(in directory: String, issuedFor names: [String]) throws -> ThrowawayTLS {
        let names = Set(names)
        let ips = names.filter(Self.isIPAddress).sorted()
        let dnsNames = names.subtracting(ips).sorted()
        let (ca, certificate, key) = try pems(dnsNames: dnsNames, ips: ips)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let tls = ThrowawayTLS(directory: directory)
        try write(ca, to: tls.caFile, mode: 0o644)
        try write(certificate, to: tls.certificateFile, mode: 0o644)
        try write(key, to: tls.keyFile, mode: 0o600)
        return tls
    }

    /// The emulator's side: the server certificate and key.
    public func serverTLS() throws -> ServerTLS {
        try ServerTLS.load(certificateFile: certificateFile, keyFile: keyFile)
    }

    private static func pems(dnsNames: [String], ips: [String]) throws -> (ca: String, certificate: String, key: String) {
        let dns = dnsNames.map { strdup($0) }
        let ip = ips.map { strdup($0) }
        defer { (dns + ip).forEach { free($0) } }
        var caPEM: UnsafeMutablePointer<CChar>?
        var certificatePEM: UnsafeMutablePointer<CChar>?
        var keyPEM: UnsafeMutablePointer<CChar>?
        let generated = dns.map { UnsafePointer($0) }.withUnsafeBufferPointer { dnsBuffer in
            ip.map { UnsafePointer($0) }.withUnsafeBufferPointer { ipBuffer in
                fr_tls_generate_throwaway(dnsBuffer.baseAddress, dns.count, ipBuffer.baseAddress, ip.count, 30,
                                          &caPEM, &certificatePEM, &keyPEM)
            }
        }
        defer { for pem in [caPEM, certificatePEM, keyPEM] { fr_free(pem) } }
        guard generated == 1, let caPEM, let certificatePEM, let keyPEM else {
            throw ServerTLSError("cannot generate a throwaway certificate (libcrypto failed)")
        }
        return (String(cString: caPEM), String(cString: certificatePEM), String(cString: keyPEM))
    }

    private static func write(_ text: String, to path: String, mode: Int) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode]) else {
            throw ServerTLSError("cannot write \(path)")
        }
    }

    private static func isIPAddress(_ text: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }
}
