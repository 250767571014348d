import Foundation
import JSON

/// A Google service-account key file (the JSON Google Cloud issues).
/// Errors name the file and the problem, never the key's contents.
public struct ServiceAccountKey: Sendable {
    public let projectId: String
    public let privateKeyId: String
    public let clientEmail: String
    public let privateKey: RSAKey
    /// Where an OAuth access token is obtained with this key (JWT-bearer grant).
    public let tokenURI: String

    public static let defaultTokenURI = "https://oauth2.googleapis.com/token"

    public struct LoadError: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    public init(projectId: String, privateKeyId: String, clientEmail: String, privateKey: RSAKey,
                tokenURI: String = ServiceAccountKey.defaultTokenURI) {
        self.projectId = projectId
        self.privateKeyId = privateKeyId
        self.clientEmail = clientEmail
        self.privateKey = privateKey
        self.tokenURI = tokenURI
    }

    public static func load(path: String) throws(LoadError) -> ServiceAccountKey {
        guard FileManager.default.fileExists(atPath: path) else {
            throw LoadError(message: "key file \(path): no such file")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw LoadError(message: "key file \(path): cannot be read (check its permissions)")
        }
        return try parse(Array(data), source: "key file \(path)")
    }

    public static func parse(_ bytes: [UInt8], source: String) throws(LoadError) -> ServiceAccountKey {
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes)
        } catch {
            throw LoadError(message: "\(source): not valid JSON (\(error.message) at byte \(error.offset))")
        }
        guard case .object = document else { throw LoadError(message: "\(source): not a JSON object") }
        func field(_ name: String) throws(LoadError) -> String {
            guard let value = document[name]?.stringValue, !value.isEmpty else {
                throw LoadError(message: "\(source): missing or empty field \"\(name)\"")
            }
            return value
        }
        let type = try field("type")
        guard type == "service_account" else {
            throw LoadError(message: "\(source): \"type\" is \"\(type)\", expected \"service_account\"")
        }
        let privateKeyPEM = try field("private_key")
        guard let key = RSAKey(privateKeyPEM: privateKeyPEM) else {
            throw LoadError(message: "\(source): \"private_key\" is not a parsable RSA private key in PEM form")
        }
        return ServiceAccountKey(
            projectId: try field("project_id"), privateKeyId: try field("private_key_id"),
            clientEmail: try field("client_email"), privateKey: key,
            tokenURI: document["token_uri"]?.stringValue ?? defaultTokenURI)
    }

    /// A warning when the file can be read by its group or by others: a private key
    /// should be readable by its owner only (on Kubernetes: `defaultMode: 0400`).
    public static func permissionWarning(path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue, mode & 0o077 != 0
        else { return nil }
        return "key file \(path) is readable by group or others (mode \(String(mode & 0o777, radix: 8))); "
            + "restrict it to its owner (chmod 600)"
    }

    /// A new key file's JSON text with a freshly generated key, for demos and tests.
    public static func generateKeyFileJSON(projectId: String, clientEmail: String, privateKeyId: String,
                                           tokenURI: String = defaultTokenURI) -> String? {
        guard let pem = RSAKey.generatePrivateKeyPEM() else { return nil }
        var writer = JSONObjectWriter()
        writer.add("type", "service_account")
        writer.add("project_id", projectId)
        writer.add("private_key_id", privateKeyId)
        writer.add("private_key", pem)
        writer.add("client_email", clientEmail)
        writer.add("token_uri", tokenURI)
        return writer.json
    }
}
