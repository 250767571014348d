import FleetModel
import JSON

/// The JWT Fleet Engine expects for one vehicle (docs/jwt.md).
public enum FleetEngineClaims {
    public static let audience = "https://fleetengine.googleapis.com/"
    /// Fleet Engine rejects tokens that expire more than an hour after they were issued.
    public static let maximumLifetimeSeconds: Int64 = 3600
    public static let wildcard = "*"

    public static func headerJSON(keyId: String) -> String {
        var header = JSONObjectWriter()
        header.add("alg", "RS256")
        header.add("typ", "JWT")
        header.add("kid", keyId)
        return header.json
    }

    /// - Parameter vehicleId: the vehicle the token authorizes, or `wildcard`.
    public static func claimsJSON(
        serviceAccount: String, kind: VehicleKind, vehicleId: String, issuedAt: Int64, lifetimeSeconds: Int64
    ) -> String {
        var authorization = JSONObjectWriter()
        authorization.add(kind.claimName, vehicleId)
        var claims = JSONObjectWriter()
        claims.add("iss", serviceAccount)
        claims.add("sub", serviceAccount)
        claims.add("aud", audience)
        claims.add("iat", Int(issuedAt))
        claims.add("exp", Int(issuedAt + min(lifetimeSeconds, maximumLifetimeSeconds)))
        claims.add("authorization", authorization)
        return claims.json
    }
}
