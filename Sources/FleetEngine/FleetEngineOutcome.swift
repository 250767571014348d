/// What the relay should do with a Fleet Engine answer (contract: fleet-engine.md).
public enum FleetEngineOutcome: Sendable, Equatable {
    case accepted
    /// 401: the token was missing, bad or expired.
    case unauthenticated
    /// 403: the token does not cover this vehicle.
    case permissionDenied
    /// Will not succeed by retrying; the records go to the dead-letter topic with `reason`.
    case rejected(reason: String)
    /// Worth retrying; `retryAfterSeconds` when the server asked for a delay.
    case transient(cause: String, retryAfterSeconds: Double?)

    public static func classify(status: Int, retryAfterSeconds: Double? = nil) -> FleetEngineOutcome {
        switch status {
        case 200..<300: .accepted
        case 400: .rejected(reason: "fleet_engine_invalid")
        case 401: .unauthenticated
        case 403: .permissionDenied
        case 404: .rejected(reason: "vehicle_not_found")
        case 408, 429, 500..<600: .transient(cause: "http_\(status)", retryAfterSeconds: retryAfterSeconds)
        default: .rejected(reason: "fleet_engine_rejected")
        }
    }

    /// The dead-letter reason when the authentication retry also failed.
    public var deadLetterReason: String {
        switch self {
        case .accepted: ""
        case .unauthenticated: "unauthenticated"
        case .permissionDenied: "permission_denied"
        case .rejected(let reason): reason
        case .transient(let cause, _): cause
        }
    }
}
