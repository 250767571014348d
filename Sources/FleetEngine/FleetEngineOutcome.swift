import Egress

/// What the relay should do with a Fleet Engine answer (docs/fleet-engine.md).
public enum FleetEngineOutcome: Sendable, Equatable {
    case accepted
    /// 401: the token was missing, bad or expired.
    case unauthenticated
    /// 403: the token does not cover this vehicle.
    case permissionDenied
    /// Will not succeed by retrying; the records go to the dead-letter topic for it.
    case rejected(FleetEngineRefusal)
    /// Worth retrying; `retryAfterSeconds` when the server asked for a delay.
    case transient(cause: FailureCause, retryAfterSeconds: Double?)

    public static func classify(status: Int, retryAfterSeconds: Double? = nil) -> FleetEngineOutcome {
        switch status {
        case 200..<300: .accepted
        case 400: .rejected(.invalid)
        case 401: .unauthenticated
        case 403: .permissionDenied
        case 404: .rejected(.vehicleNotFound)
        case 408, 429, 500..<600: .transient(cause: .status(status), retryAfterSeconds: retryAfterSeconds)
        default: .rejected(.otherRejection)
        }
    }

    /// Why Fleet Engine refused for good, when it did (a 401 or 403 counts once the retry
    /// with a fresh token was refused too).
    public var refusal: FleetEngineRefusal? {
        switch self {
        case .accepted, .transient: nil
        case .unauthenticated: .unauthenticated
        case .permissionDenied: .permissionDenied
        case .rejected(let refusal): refusal
        }
    }
}

/// Why Fleet Engine refused an update for good. The raw value is the dead-letter reason (the
/// `fleet-relay-error` header and the `reason` label of `fleet_relay_dead_letters_total`).
public enum FleetEngineRefusal: String, Sendable, CaseIterable {
    /// 400: the request is invalid.
    case invalid = "fleet_engine_invalid"
    /// 404: the vehicle does not exist in the project.
    case vehicleNotFound = "vehicle_not_found"
    /// Another status that retrying cannot mend.
    case otherRejection = "fleet_engine_rejected"
    case unauthenticated
    case permissionDenied = "permission_denied"
}

/// Why an attempt failed and is worth trying again. The raw value is the `cause` label of
/// `fleet_relay_retries_total`: `signer`, `http_<status>`, a transport cause, or the refusal
/// that led to a fresh token.
public enum FailureCause: Hashable, Sendable, RawRepresentable, CustomStringConvertible {
    /// No token could be had.
    case signer
    /// No answer: the transport failed.
    case transport(TransportFailure.Cause)
    /// Fleet Engine answered with a status worth retrying: 408, 429 or 5xx.
    case status(Int)
    /// Fleet Engine refused the token; the attempt goes on with a fresh one.
    case refusedToken(FleetEngineRefusal)

    /// 429 RESOURCE_EXHAUSTED: the project's quota.
    public static let throttled = FailureCause.status(429)

    public init?(rawValue: String) {
        if rawValue == "signer" {
            self = .signer
        } else if let cause = TransportFailure.Cause(rawValue: rawValue) {
            self = .transport(cause)
        } else if rawValue.hasPrefix("http_"), let status = Int(rawValue.dropFirst(5)) {
            self = .status(status)
        } else if let refusal = FleetEngineRefusal(rawValue: rawValue) {
            self = .refusedToken(refusal)
        } else {
            return nil
        }
    }

    public var rawValue: String {
        switch self {
        case .signer: "signer"
        case .transport(let cause): cause.rawValue
        case .status(let status): "http_\(status)"
        case .refusedToken(let refusal): refusal.rawValue
        }
    }

    public var description: String { rawValue }

    /// Whether the configuration must mend it (a CA file, a proxy, an HTTP version), not time.
    public var isConfiguration: Bool {
        if case .transport(let cause) = self { cause.isConfiguration } else { false }
    }
}
