import Egress
import FleetAuth
import FleetModel
import JSON

/// Asks the operator's own token service for each vehicle's token:
/// `GET <url>?vehicle_id=<id>&kind=<kind>`, answered with JSON holding the token
/// and its expiry. Every token is checked before use (`IssuedTokenCheck`).
public struct TokenServiceSigner: VehicleTokenSigner {
    public enum ExpiryFormat: String, Sendable, CaseIterable {
        /// Absolute expiry, seconds since the epoch.
        case epoch
        /// Lifetime in seconds from the answer.
        case secondsFromNow = "seconds-from-now"
    }

    public struct Configuration: Sendable {
        public var url: String
        public var vehicleParameter = "vehicle_id"
        public var kindParameter = "kind"
        /// A header sent with every call, e.g. `Authorization: Bearer …`. Never logged.
        public var header: (name: String, value: String)?
        public var tokenField = "token"
        public var expiryField = "expiration"
        public var expiryFormat = ExpiryFormat.epoch

        public init(url: String) {
            self.url = url
        }
    }

    public let name = "token-service"
    private let configuration: Configuration
    private let http: SignerHTTP
    private let clock: EpochClock

    public init(configuration: Configuration, http: SignerHTTP, clock: @escaping EpochClock = systemEpochClock) {
        self.configuration = configuration
        self.http = http
        self.clock = clock
    }

    public func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        let url = URLText.appendingQuery(configuration.url, [
            (configuration.vehicleParameter, vehicle.id), (configuration.kindParameter, vehicle.kind.rawValue),
        ])
        var headers = [("Accept", "application/json")]
        if let header = configuration.header { headers.append((header.name, header.value)) }
        let response = try await http.send(.GET, url, headers: headers, peer: "token service", signer: name)
        guard response.status == 200 else {
            throw SignerError.status(response.status, from: "token service", signer: name, body: response.body)
        }
        let (token, reportedExpiry) = try parse(response.body)
        return try IssuedTokenCheck.validate(token, for: vehicle, now: clock(), reportedExpiry: reportedExpiry, signer: name)
    }

    private func parse(_ body: [UInt8]) throws(SignerError) -> (token: String, expiry: Int64) {
        func bad(_ problem: String) -> SignerError { SignerError(signer: name, reason: .badResponse, "token service answer \(problem)") }
        guard let document = try? JSONParser.parse(body), case .object = document else { throw bad("is not a JSON object") }
        guard let token = document[configuration.tokenField]?.stringValue, !token.isEmpty else {
            throw bad("has no string field \"\(configuration.tokenField)\" (see --token-field)")
        }
        // Numbers or numeric strings: both are common in token services.
        let value = document[configuration.expiryField]
        guard let expiry = value?.numberValue ?? value?.stringValue.flatMap(Double.init), expiry.isFinite, abs(expiry) < 1e15 else {
            throw bad("has no numeric field \"\(configuration.expiryField)\" (see --expiry-field)")
        }
        switch configuration.expiryFormat {
        case .epoch: return (token, Int64(expiry))
        case .secondsFromNow: return (token, clock() + Int64(expiry))
        }
    }
}
