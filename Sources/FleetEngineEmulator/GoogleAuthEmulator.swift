import FleetAuth
import HTTPServing
import JSON
import Synchronization

/// Google's side of keyless signing, for tests and local setups:
/// - the metadata server's token, email and project-id endpoints (`GCE_METADATA_HOST`);
/// - the OAuth token endpoint's JWT-bearer grant (a key file's `token_uri`);
/// - the IAM Credentials API's `signJwt`, which signs claims with `signingKey` for
///   callers holding an access token it issued.
public final class GoogleAuthEmulator: EmulatedService {
    public static let oauthTokenPath = "/token"
    static let metadataPrefix = "/computeMetadata/v1/"
    static let signJwtPrefix = "/v1/projects/-/serviceAccounts/"
    static let jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// signJwt refuses claims that expire more than 12 hours ahead.
    static let maximumSignedLifetime: Int64 = 12 * 3600

    public struct Statistics: Sendable {
        public var accessTokensFromMetadata = 0
        public var accessTokensFromGrants = 0
        public var refusedGrants = 0
        public var signJwtRequests = 0
        public var signJwtUnauthenticated = 0
        public var signedTokens = 0
    }

    private struct State {
        var statistics = Statistics()
        var accessTokens: [String: Int64] = [:]
        var signJwtDown = false
        var secrets: [String] = []
    }

    private let signingKey: ServiceAccountKey
    private let callerKey: ServiceAccountKey?
    private let accessTokenLifetime: Int64
    private let clock: EpochClock
    private let state = Mutex(State())

    /// - Parameters:
    ///   - signingKey: the service account signJwt signs for (its key stays "inside Google").
    ///   - callerKey: the key file whose JWT-bearer grants are honoured; nil refuses every grant.
    ///   - accessTokenLifetime: `expires_in` of issued access tokens.
    public init(signingKey: ServiceAccountKey, callerKey: ServiceAccountKey? = nil, accessTokenLifetime: Int64 = 3600,
                clock: @escaping EpochClock = systemEpochClock) {
        self.signingKey = signingKey
        self.callerKey = callerKey
        self.accessTokenLifetime = accessTokenLifetime
        self.clock = clock
    }

    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Answers signJwt with 503 while true.
    public var signJwtDown: Bool {
        get { state.withLock { $0.signJwtDown } }
        set { state.withLock { $0.signJwtDown = newValue } }
    }

    /// Access tokens and signed JWTs handed out (the most recent 10,000), for leak checks.
    public var issuedSecrets: [String] { state.withLock { $0.secrets } }

    /// Forgets every access token, as when credentials are revoked: signJwt answers 401 to them.
    public func revokeAccessTokens() {
        state.withLock { $0.accessTokens = [:] }
    }

    public func respond(to request: HTTPRequest) async -> HTTPResponse? {
        if request.path.hasPrefix(Self.metadataPrefix) { return metadata(request) }
        if request.path == Self.oauthTokenPath { return grant(request) }
        if request.path.hasPrefix(Self.signJwtPrefix), request.path.hasSuffix(":signJwt") { return signJwt(request) }
        return nil
    }

    // MARK: Metadata server

    private func metadata(_ request: HTTPRequest) -> HTTPResponse {
        guard request.header("Metadata-Flavor") == "Google" else {
            return .text(403, "Missing Metadata-Flavor:Google header.\n")
        }
        switch request.path.dropFirst(Self.metadataPrefix.count) {
        case "instance/service-accounts/default/token":
            return issueAccessToken(fromMetadata: true)
        case "instance/service-accounts/default/email":
            return .text(200, signingKey.clientEmail, contentType: "application/text")
        case "project/project-id":
            return .text(200, signingKey.projectId, contentType: "application/text")
        default:
            return .text(404, "Not found.\n")
        }
    }

    // MARK: OAuth token endpoint

    private func grant(_ request: HTTPRequest) -> HTTPResponse {
        let fields = request.formFields
        guard request.method == "POST", request.parameter("grant_type", in: fields) == Self.jwtBearerGrant else {
            return oauthError("unsupported_grant_type", "Only the JWT-bearer grant is emulated.")
        }
        guard let assertion = request.parameter("assertion", in: fields) else {
            return oauthError("invalid_request", "Missing assertion.")
        }
        if let problem = assertionProblem(assertion) { return oauthError("invalid_grant", problem) }
        return issueAccessToken(fromMetadata: false)
    }

    private func assertionProblem(_ assertion: String) -> String? {
        guard let callerKey else { return "No service account key is accepted here." }
        guard let parts = try? JWT.decode(assertion), parts.header["kid"]?.stringValue == callerKey.privateKeyId,
            callerKey.privateKey.verifySHA256(parts.signingInput, signature: parts.signature)
        else { return "Invalid JWT Signature." }
        let claims = parts.claims
        guard claims["iss"]?.stringValue == callerKey.clientEmail else { return "Invalid issuer." }
        guard claims["aud"]?.stringValue?.hasSuffix(Self.oauthTokenPath) == true else { return "Invalid audience." }
        guard claims["scope"]?.stringValue?.isEmpty == false else { return "Missing scope." }
        guard let issued = claims["iat"]?.numberValue, let expires = claims["exp"]?.numberValue,
            expires - issued <= 3600, Int64(expires) > clock()
        else { return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe." }
        return nil
    }

    private func oauthError(_ code: String, _ description: String) -> HTTPResponse {
        state.withLock { $0.statistics.refusedGrants += 1 }
        var body = JSONObjectWriter()
        body.add("error", code)
        body.add("error_description", description)
        return .json(400, body.json)
    }

    private func issueAccessToken(fromMetadata: Bool) -> HTTPResponse {
        let token = "ya29.emulated-" + Base64URL.encode((0..<24).map { _ in UInt8.random(in: 0...255) })
        state.withLock { state in
            state.accessTokens[token] = clock() + accessTokenLifetime
            if fromMetadata { state.statistics.accessTokensFromMetadata += 1 } else { state.statistics.accessTokensFromGrants += 1 }
            remember(token, in: &state)
        }
        var body = JSONObjectWriter()
        body.add("access_token", token)
        body.add("expires_in", Int(accessTokenLifetime))
        body.add("token_type", "Bearer")
        return .json(200, body.json)
    }

    // MARK: IAM signJwt

    private func signJwt(_ request: HTTPRequest) -> HTTPResponse {
        let (down, authenticated) = state.withLock { state in
            state.statistics.signJwtRequests += 1
            let expiry = request.bearerToken.flatMap { state.accessTokens[$0] }
            let authenticated = expiry.map { $0 > clock() } ?? false
            if !authenticated { state.statistics.signJwtUnauthenticated += 1 }
            return (state.signJwtDown, authenticated)
        }
        if down { return .googleError(503, "UNAVAILABLE", "The service is currently unavailable.") }
        guard request.method == "POST" else { return .googleError(405, "METHOD_NOT_ALLOWED", "Use POST.") }
        guard authenticated else {
            return .googleError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        }
        let account = request.path.dropFirst(Self.signJwtPrefix.count).dropLast(":signJwt".count)
        guard String(account).removingPercentEncoding == signingKey.clientEmail else {
            return .googleError(403, "PERMISSION_DENIED", "Permission 'iam.serviceAccounts.signJwt' denied on resource.")
        }
        guard let payload = (try? JSONParser.parse(request.body))?["payload"]?.stringValue,
            let claims = try? JSONParser.parse(payload), case .object = claims
        else { return .googleError(400, "INVALID_ARGUMENT", "payload must be a JSON object serialized as a string.") }
        if let expires = claims["exp"]?.numberValue, Int64(expires) <= clock() || Int64(expires) > clock() + Self.maximumSignedLifetime {
            return .googleError(400, "INVALID_ARGUMENT", "exp must be in the future and at most 12 hours ahead.")
        }
        guard let signed = JWT.signRS256(headerJSON: FleetEngineClaims.headerJSON(keyId: signingKey.privateKeyId),
                                         claimsJSON: payload, key: signingKey.privateKey)
        else { return .googleError(500, "INTERNAL", "Signing failed.") }
        state.withLock { state in
            state.statistics.signedTokens += 1
            remember(signed, in: &state)
        }
        var body = JSONObjectWriter()
        body.add("keyId", signingKey.privateKeyId)
        body.add("signedJwt", signed)
        return .json(200, body.json)
    }

    private func remember(_ secret: String, in state: inout State) {
        state.secrets.append(secret)
        if state.secrets.count > 10_000 { state.secrets.removeFirst(1000) }
    }
}
