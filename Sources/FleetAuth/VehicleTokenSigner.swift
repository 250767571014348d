import FleetModel

/// A JWT for one vehicle and when it stops being valid.
public struct VehicleToken: Sendable {
    public let token: String
    /// Expiry in seconds since the epoch (the token's `exp`).
    public let expiresAt: Int64

    public init(token: String, expiresAt: Int64) {
        self.token = token
        self.expiresAt = expiresAt
    }
}

extension VehicleToken: CustomStringConvertible {
    /// Never the token itself: descriptions end up in logs.
    public var description: String { "VehicleToken(expiresAt: \(expiresAt))" }
}

/// Where vehicle tokens come from: a local key, a token service, or IAM signJwt.
public protocol VehicleTokenSigner: Sendable {
    /// A short name for logs and metrics labels (`local`, `token-service`, `iam`).
    var name: String { get }
    /// A token for `vehicle` (its `id` is `*` for a wildcard token). Throws `SignerError`.
    func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken
}

/// The current time in whole seconds since the epoch; injectable for tests.
public typealias EpochClock = @Sendable () -> Int64

public let systemEpochClock: EpochClock = { WallClock.nowMilliseconds() / 1000 }
