import FleetModel
import JSON

/// Checks a token minted outside the process (token service, IAM signJwt) before
/// it is cached: a token for the wrong vehicle, an unrequested wildcard, another
/// audience or a lifetime Fleet Engine refuses is never forwarded. The signature
/// is Fleet Engine's to check; the relay does not hold the signer's public key.
public enum IssuedTokenCheck {
    /// Seconds by which a separately reported expiry may differ from the `exp` claim.
    public static let expiryTolerance: Int64 = 60

    /// - Parameters:
    ///   - vehicle: the token's cache key: a vehicle, or the wildcard `*` when wildcard tokens are configured.
    ///   - reportedExpiry: expiry the signer reported beside the token, if any.
    /// - Returns: the token with its `exp`.
    public static func validate(_ token: String, for vehicle: VehicleIdentity, now: Int64, reportedExpiry: Int64?,
                                signer: String) throws(SignerError) -> VehicleToken {
        func reject(_ problem: String) -> SignerError {
            SignerError(signer: signer, reason: .rejectedToken, "token for \(vehicle) rejected: \(problem)")
        }
        let parts: JWT.Parts
        do {
            parts = try JWT.decode(token)
        } catch {
            throw reject("not a JWT (\(error.message))")
        }
        guard parts.header["alg"]?.stringValue == "RS256" else { throw reject("alg is not RS256") }
        let claims = parts.claims
        guard claims["aud"]?.stringValue == FleetEngineClaims.audience else {
            throw reject("aud is not \(FleetEngineClaims.audience)")
        }
        let granted = claims["authorization"]?[vehicle.kind.claimName]?.stringValue
        guard granted == vehicle.id else {
            if granted == FleetEngineClaims.wildcard { throw reject("it is a wildcard token, and wildcard tokens are not configured") }
            throw reject(granted.map { "its authorization claim names \(vehicle.kind.claimName) \($0)" }
                ?? "its authorization claim has no \(vehicle.kind.claimName)")
        }
        guard let expiry = claims["exp"]?.numberValue, expiry == expiry.rounded(), abs(expiry) < 1e15 else {
            throw reject("exp is missing or not an integer")
        }
        let expiresAt = Int64(expiry)
        guard expiresAt > now else { throw reject("it expired at \(expiresAt), now is \(now)") }
        if let issued = claims["iat"]?.numberValue, expiry - issued > Double(FleetEngineClaims.maximumLifetimeSeconds) {
            throw reject("its lifetime exceeds the one hour Fleet Engine accepts")
        }
        if let reportedExpiry, abs(reportedExpiry - expiresAt) > expiryTolerance {
            throw reject("reported expiry \(reportedExpiry) does not match its exp claim \(expiresAt)")
        }
        return VehicleToken(token: token, expiresAt: expiresAt)
    }
}
