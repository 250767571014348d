import FleetAuth
import FleetModel
import HTTPServing
import JSON
import Synchronization

/// An operator's token service, as the token-service signer calls it:
/// `GET /vehicle-token?vehicle_id=<id>&kind=<kind>` answers `{"token", "expiration"}`
/// with a JWT signed by `key`. It can require a header, go down, or misbehave by
/// answering tokens for the wrong vehicle, to test the relay's checks.
public final class TokenServiceEmulator: EmulatedService {
    public static let path = "/vehicle-token"

    public enum Behaviour: Sendable {
        case normal
        /// Every call answered 503.
        case down
        /// Calls for these vehicles answered 503; the others served.
        case downFor(Set<String>)
        /// Tokens authorize another vehicle than the one asked for.
        case wrongVehicle
        /// Tokens authorize every vehicle (`*`) whatever was asked for.
        case wildcard
    }

    /// The answer's field names and expiry form (the relay's `--token-field`, `--expiry-field`, `--expiry-format`).
    public struct AnswerFormat: Sendable {
        public var tokenField = "token"
        public var expiryField = "expiration"
        public var secondsFromNow = false
        public init() {}
    }

    public struct Statistics: Sendable {
        public var requests = 0
        public var tokensIssued = 0
        /// Calls refused for a missing or wrong required header.
        public var unauthorized = 0
        /// Tokens issued per vehicle id.
        public var issuedPerVehicle: [String: Int] = [:]
        /// Calls answered 503 per vehicle id (`downFor`).
        public var refusedPerVehicle: [String: Int] = [:]
    }

    private struct State {
        var behaviour = Behaviour.normal
        var statistics = Statistics()
        var issuedTokens: [String] = []
    }

    private let signer: LocalKeySigner
    private let requiredHeader: (name: String, value: String)?
    private let format: AnswerFormat
    private let clock: EpochClock
    private let state = Mutex(State())

    public init(key: ServiceAccountKey, requiredHeader: (name: String, value: String)? = nil, format: AnswerFormat = .init(),
                clock: @escaping EpochClock = systemEpochClock) {
        self.signer = LocalKeySigner(key: key, clock: clock)
        self.requiredHeader = requiredHeader
        self.format = format
        self.clock = clock
    }

    public var behaviour: Behaviour {
        get { state.withLock { $0.behaviour } }
        set { state.withLock { $0.behaviour = newValue } }
    }

    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Every token answered so far (the most recent 10,000), for tests that prove tokens never leak.
    public var issuedTokens: [String] { state.withLock { $0.issuedTokens } }

    public func respond(to request: HTTPRequest) async -> HTTPResponse? {
        guard request.path == Self.path else { return nil }
        let behaviour = state.withLock { state in
            state.statistics.requests += 1
            return state.behaviour
        }
        guard request.method == "GET" else { return .googleError(405, "METHOD_NOT_ALLOWED", "Use GET.") }
        if let requiredHeader, request.header(requiredHeader.name) != requiredHeader.value {
            state.withLock { $0.statistics.unauthorized += 1 }
            return .googleError(401, "UNAUTHENTICATED", "Missing or wrong \(requiredHeader.name) header.")
        }
        if case .down = behaviour { return .googleError(503, "UNAVAILABLE", "The token service is down.") }
        guard let id = request.parameter("vehicle_id"), !id.isEmpty,
            let kind = request.parameter("kind").flatMap(VehicleKind.init(rawValue:))
        else { return .googleError(400, "INVALID_ARGUMENT", "vehicle_id and kind (vehicle or delivery_vehicle) are required.") }
        if case .downFor(let vehicles) = behaviour, vehicles.contains(id) {
            state.withLock { $0.statistics.refusedPerVehicle[id, default: 0] += 1 }
            return .googleError(503, "UNAVAILABLE", "The token service cannot sign for \(id) now.")
        }
        let granted = switch behaviour {
        case .wrongVehicle: id + "-other"
        case .wildcard: FleetEngineClaims.wildcard
        case .normal, .down, .downFor: id
        }
        guard let token = try? await signer.mint(for: VehicleIdentity(kind: kind, id: granted)) else {
            return .googleError(500, "INTERNAL", "Signing failed.")
        }
        record(token.token, vehicle: id)
        var body = JSONObjectWriter()
        body.add(format.tokenField, token.token)
        body.add(format.expiryField, Int(format.secondsFromNow ? token.expiresAt - clock() : token.expiresAt))
        return .json(200, body.json)
    }

    private func record(_ token: String, vehicle: String) {
        state.withLock { state in
            state.statistics.tokensIssued += 1
            state.statistics.issuedPerVehicle[vehicle, default: 0] += 1
            state.issuedTokens.append(token)
            if state.issuedTokens.count > 10_000 { state.issuedTokens.removeFirst(1000) }
        }
    }
}
