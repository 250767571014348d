import Egress
import FleetAuth
import FleetModel
import JSON

/// Signs vehicle tokens keylessly with the IAM Credentials API's `signJwt`: the
/// claims are built here, Google signs them with a key of `serviceAccount` that
/// never leaves Google. The call is authorized by an access token from
/// Application Default Credentials (e.g. the pod's workload identity).
public struct IAMSigner: VehicleTokenSigner {
    public static let defaultURL = "https://iamcredentials.googleapis.com"

    public let name = "iam"
    private let serviceAccount: String
    private let endpoint: String
    private let credentials: CachedAccessToken
    private let http: SignerHTTP
    private let lifetimeSeconds: Int64
    private let clock: EpochClock

    /// - Parameter serviceAccount: the account whose identity the tokens carry (`iss`, `sub`);
    ///   the credentials need `roles/iam.serviceAccountTokenCreator` on it.
    public init(serviceAccount: String, iamURL: String = IAMSigner.defaultURL, credentials: CachedAccessToken,
                http: SignerHTTP, lifetimeSeconds: Int64 = FleetEngineClaims.maximumLifetimeSeconds,
                clock: @escaping EpochClock = systemEpochClock) {
        self.serviceAccount = serviceAccount
        let base = iamURL.hasSuffix("/") ? String(iamURL.dropLast()) : iamURL
        self.endpoint = base + "/v1/projects/-/serviceAccounts/" + URLText.encodeComponent(serviceAccount) + ":signJwt"
        self.credentials = credentials
        self.http = http
        self.lifetimeSeconds = min(lifetimeSeconds, FleetEngineClaims.maximumLifetimeSeconds)
        self.clock = clock
    }

    public func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        let issuedAt = clock()
        var body = JSONObjectWriter()
        body.add("payload", FleetEngineClaims.claimsJSON(
            serviceAccount: serviceAccount, kind: vehicle.kind, vehicleId: vehicle.id,
            issuedAt: issuedAt, lifetimeSeconds: lifetimeSeconds))
        var response = try await signJwt(body.json)
        if response.status == 401 {
            // The access token was revoked or expired early: fetch a new one once.
            await credentials.invalidate()
            response = try await signJwt(body.json)
        }
        guard response.status == 200 else {
            throw SignerError.status(response.status, from: "IAM signJwt", signer: name, body: response.body)
        }
        guard let signed = (try? JSONParser.parse(response.body))?["signedJwt"]?.stringValue else {
            throw SignerError(signer: name, reason: .badResponse, "IAM signJwt answer has no signedJwt")
        }
        return try IssuedTokenCheck.validate(signed, for: vehicle, now: clock(), reportedExpiry: issuedAt + lifetimeSeconds,
                                             signer: name)
    }

    private func signJwt(_ body: String) async throws -> SignerHTTP.Response {
        let accessToken: String
        do {
            accessToken = try await credentials.token()
        } catch {
            throw SignerError(signer: name, reason: .credentials,
                              "no access token from \(credentials.sourceDescription): \(SignerError.message(of: error))")
        }
        return try await http.send(.POST, endpoint, headers: [
            ("Authorization", "Bearer " + accessToken), ("Content-Type", "application/json"),
        ], body: Array(body.utf8), peer: "IAM signJwt", signer: name)
    }
}
