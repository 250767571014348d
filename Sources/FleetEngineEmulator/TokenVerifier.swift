import FleetAuth
import FleetModel
import JSON
import Synchronization

/// Checks a vehicle JWT the way Fleet Engine does (docs/jwt.md).
public struct TokenVerifier: Sendable {
    public enum Failure: Error, Equatable {
        /// 401: missing, malformed, badly signed, expired or otherwise invalid.
        case unauthenticated(String)
        /// 403: valid, but its `authorization` claim does not cover the vehicle.
        case permissionDenied(String)
    }

    public let publicKey: RSAKey
    public let keyId: String
    public let serviceAccount: String
    /// Tolerated skew for `iat` in the future (Fleet Engine's documented allowance is about ten minutes).
    public let clockSkewSeconds: Int64 = 600
    /// `exp` is strict: a token is refused from its expiry second on, so a client that hands out
    /// expired tokens is caught rather than excused.
    public let expiryLeewaySeconds: Int64 = 0
    public static let expiredMessage = "JWT has expired."
    private let clock: EpochClock
    private let verifiedSignatures: VerifiedSignatures?

    /// - Parameter remembersSignatures: check each distinct token's signature once (as a
    ///   server at scale would) instead of per request; claims are still checked every time.
    public init(publicKey: RSAKey, keyId: String, serviceAccount: String, remembersSignatures: Bool = false,
                clock: @escaping EpochClock = systemEpochClock) {
        self.publicKey = publicKey
        self.keyId = keyId
        self.serviceAccount = serviceAccount
        self.clock = clock
        self.verifiedSignatures = remembersSignatures ? VerifiedSignatures() : nil
    }

    public func verify(authorizationHeader: String?, vehicle: VehicleIdentity) -> Failure? {
        guard let header = authorizationHeader, header.hasPrefix("Bearer "), header.utf8.count > 7 else {
            return .unauthenticated("Request is missing a bearer token.")
        }
        let token = String(header.dropFirst(7))
        if let claims = verifiedSignatures?.claims(of: token) {
            return verifyClaims(claims) ?? verifyAuthorization(claims, vehicle: vehicle)
        }
        let parts: JWT.Parts
        do {
            parts = try JWT.decode(token)
        } catch {
            return .unauthenticated("Malformed JWT: \(error.message).")
        }
        if let failure = verifySignature(parts) { return failure }
        verifiedSignatures?.remember(token, claims: parts.claims)
        return verifyClaims(parts.claims) ?? verifyAuthorization(parts.claims, vehicle: vehicle)
    }

    private func verifySignature(_ parts: JWT.Parts) -> Failure? {
        guard parts.header["alg"]?.stringValue == "RS256" else { return .unauthenticated("JWT alg must be RS256.") }
        guard parts.header["kid"]?.stringValue == keyId else { return .unauthenticated("JWT kid does not name a known key.") }
        guard publicKey.verifySHA256(parts.signingInput, signature: parts.signature) else {
            return .unauthenticated("JWT signature is invalid.")
        }
        return nil
    }

    private func verifyClaims(_ claims: JSONValue) -> Failure? {
        guard claims["iss"]?.stringValue == serviceAccount, claims["sub"]?.stringValue == serviceAccount else {
            return .unauthenticated("JWT iss and sub must be the service account.")
        }
        guard claims["aud"]?.stringValue == FleetEngineClaims.audience else {
            return .unauthenticated("JWT aud must be \(FleetEngineClaims.audience).")
        }
        guard let issuedAt = claims["iat"]?.numberValue, let expiresAt = claims["exp"]?.numberValue,
            issuedAt == issuedAt.rounded(), expiresAt == expiresAt.rounded()
        else { return .unauthenticated("JWT iat and exp must be integers.") }
        let now = clock()
        if Int64(expiresAt) <= now - expiryLeewaySeconds { return .unauthenticated(Self.expiredMessage) }
        if Int64(issuedAt) > now + clockSkewSeconds { return .unauthenticated("JWT iat is in the future.") }
        if expiresAt - issuedAt > Double(FleetEngineClaims.maximumLifetimeSeconds) {
            return .unauthenticated("JWT lifetime exceeds one hour.")
        }
        if expiresAt <= issuedAt { return .unauthenticated("JWT exp is not after iat.") }
        return nil
    }

    private func verifyAuthorization(_ claims: JSONValue, vehicle: VehicleIdentity) -> Failure? {
        guard let authorization = claims["authorization"]?.objectValue else {
            return .permissionDenied("JWT has no authorization claim.")
        }
        guard let allowed = authorization[vehicle.kind.claimName]?.stringValue else {
            return .permissionDenied("JWT authorization claim has no \(vehicle.kind.claimName).")
        }
        guard allowed == vehicle.id || allowed == FleetEngineClaims.wildcard else {
            return .permissionDenied("JWT does not authorize \(vehicle.kind.claimName) \(vehicle.id).")
        }
        return nil
    }
}

/// Tokens whose signature was found valid, with their decoded claims; bounded:
/// forgotten wholesale when full.
final class VerifiedSignatures: Sendable {
    private static let capacity = 500_000
    private let tokens = Mutex([String: JSONValue]())

    func claims(of token: String) -> JSONValue? { tokens.withLock { $0[token] } }

    func remember(_ token: String, claims: JSONValue) {
        tokens.withLock { tokens in
            if tokens.count >= Self.capacity { tokens.removeAll(keepingCapacity: true) }
            tokens[token] = claims
        }
    }
}
