import Egress
import FleetAuth
import Foundation
import JSON

/// Application Default Credentials, as Google's client libraries find them:
/// the service-account key file named by `GOOGLE_APPLICATION_CREDENTIALS`, else
/// the GCE/GKE metadata server (workload identity on GKE).
public enum ApplicationDefaultCredentials {
    public struct Resolved: Sendable {
        public let source: any AccessTokenSource
        /// The key file's path when credentials come from one.
        public let keyFile: String?
        /// The credentials' own service account and project, when known without a network call.
        public let serviceAccount: String?
        public let projectId: String?
    }

    public static func resolve(environment: [String: String], http: SignerHTTP,
                               clock: @escaping EpochClock = systemEpochClock) throws(SignerError) -> Resolved {
        if let path = environment["GOOGLE_APPLICATION_CREDENTIALS"], !path.isEmpty {
            let key: ServiceAccountKey
            do {
                key = try ServiceAccountKey.load(path: path)
            } catch {
                throw SignerError(signer: "iam", reason: .credentials, "GOOGLE_APPLICATION_CREDENTIALS: \(error.message)")
            }
            if let problem = URLText.insecurityReason(key.tokenURI) {
                throw SignerError(signer: "iam", reason: .credentials, "key file \(path): token_uri \(problem)")
            }
            return Resolved(source: ServiceAccountGrant(key: key, keyFile: path, http: http, clock: clock),
                            keyFile: path, serviceAccount: key.clientEmail, projectId: key.projectId)
        }
        let metadata = MetadataServer(host: environment["GCE_METADATA_HOST"], http: http, clock: clock)
        return Resolved(source: metadata, keyFile: nil, serviceAccount: nil, projectId: nil)
    }
}

/// The metadata server of a GCE VM or GKE pod: access tokens for the attached
/// service account, its email and the project id.
public struct MetadataServer: AccessTokenSource {
    public static let defaultHost = "metadata.google.internal"
    let baseURL: String
    let http: SignerHTTP
    let clock: EpochClock

    /// - Parameter host: `GCE_METADATA_HOST` (host[:port]), as Google's libraries honour it.
    public init(host: String?, http: SignerHTTP, clock: @escaping EpochClock = systemEpochClock) {
        self.baseURL = "http://" + (host.flatMap { $0.isEmpty ? nil : $0 } ?? Self.defaultHost) + "/computeMetadata/v1"
        self.http = http
        self.clock = clock
    }

    public var description: String { "metadata server \(baseURL)" }

    public func fetch() async throws -> AccessToken {
        let body = try await get("/instance/service-accounts/default/token")
        return try AccessToken.parse(body, now: clock(), from: "metadata server", signer: "iam")
    }

    /// The default service account's email.
    public func serviceAccountEmail() async throws -> String {
        try await text("/instance/service-accounts/default/email")
    }

    public func projectId() async throws -> String {
        try await text("/project/project-id")
    }

    private func text(_ path: String) async throws -> String {
        let text = String(decoding: try await get(path), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { throw SignerError(signer: "iam", reason: .credentials, "metadata server answered nothing for \(path)") }
        return text
    }

    private func get(_ path: String) async throws -> [UInt8] {
        let response: SignerHTTP.Response
        do {
            response = try await http.send(.GET, baseURL + path, headers: [("Metadata-Flavor", "Google")],
                                           peer: "metadata server", signer: "iam")
        } catch {
            throw SignerError(signer: "iam", reason: .credentials, SignerError.message(of: error))
        }
        guard response.status == 200 else {
            throw SignerError(signer: "iam", reason: .credentials, "metadata server answered HTTP \(response.status) for \(path)")
        }
        return response.body
    }
}

/// A service-account key exchanged for access tokens at its `token_uri` with the
/// JWT-bearer grant (RFC 7523), as Google's libraries do for key-file credentials.
public struct ServiceAccountGrant: AccessTokenSource {
    public static let scope = "https://www.googleapis.com/auth/cloud-platform"
    static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    let key: ServiceAccountKey
    let keyFile: String
    let http: SignerHTTP
    let clock: EpochClock

    public init(key: ServiceAccountKey, keyFile: String, http: SignerHTTP, clock: @escaping EpochClock = systemEpochClock) {
        self.key = key
        self.keyFile = keyFile
        self.http = http
        self.clock = clock
    }

    public var description: String { "service account key \(keyFile)" }

    public func fetch() async throws -> AccessToken {
        let now = clock()
        guard let assertion = JWT.signRS256(headerJSON: FleetEngineClaims.headerJSON(keyId: key.privateKeyId),
                                            claimsJSON: assertionClaims(issuedAt: now), key: key.privateKey)
        else { throw SignerError(signer: "iam", reason: .credentials, "RS256 signing of the token grant failed") }
        let body = URLText.form([("grant_type", Self.grantType), ("assertion", assertion)])
        let response: SignerHTTP.Response
        do {
            response = try await http.send(.POST, key.tokenURI, headers: [("Content-Type", "application/x-www-form-urlencoded")],
                                           body: Array(body.utf8), peer: "OAuth token endpoint", signer: "iam")
        } catch {
            throw SignerError(signer: "iam", reason: .credentials, SignerError.message(of: error))
        }
        guard response.status == 200 else {
            let detail = errorMessage(response.body).map { ": \($0)" } ?? ""
            throw SignerError(signer: "iam", reason: .credentials, "OAuth token endpoint answered HTTP \(response.status)\(detail)")
        }
        return try AccessToken.parse(response.body, now: clock(), from: "OAuth token endpoint", signer: "iam")
    }

    private func assertionClaims(issuedAt: Int64) -> String {
        var claims = JSONObjectWriter()
        claims.add("iss", key.clientEmail)
        claims.add("scope", Self.scope)
        claims.add("aud", key.tokenURI)
        claims.add("iat", Int(issuedAt))
        claims.add("exp", Int(issuedAt + 3600))
        return claims.json
    }
}
