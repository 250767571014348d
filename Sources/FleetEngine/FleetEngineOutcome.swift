/// What the relay should do with a Fleet Engine answer (docs/fleet-engine.md).
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
        case 400: .rejected(reason: Reason.invalid)
        case 401: .unauthenticated
        case 403: .permissionDenied
        case 404: .rejected(reason: Reason.vehicleNotFound)
        case 408, 429, 500..<600: .transient(cause: "http_\(status)", retryAfterSeconds: retryAfterSeconds)
        default: .rejected(reason: Reason.otherRejection)
        }
    }

    /// Dead-letter reasons of Fleet Engine's answers.
    public enum Reason {
        static let invalid = "fleet_engine_invalid"
        static let vehicleNotFound = "vehicle_not_found"
        static let otherRejection = "fleet_engine_rejected"
        static let unauthenticated = "unauthenticated"
        static let permissionDenied = "permission_denied"

        /// Every reason an answer can dead-letter records for.
        public static let all = [invalid, vehicleNotFound, otherRejection, unauthenticated, permissionDenied]
    }

    /// The dead-letter reason when the authentication retry also failed.
    public var deadLetterReason: String {
        switch self {
        case .accepted: ""
        case .unauthenticated: Reason.unauthenticated
        case .permissionDenied: Reason.permissionDenied
        case .rejected(let reason): reason
        case .transient(let cause, _): cause
        }
    }
}
