import FleetModel

/// Signs vehicle tokens in process with a service-account key file.
public struct LocalKeySigner: VehicleTokenSigner {
    public let name = "local"
    private let key: ServiceAccountKey
    private let lifetimeSeconds: Int64
    private let clock: EpochClock

    public init(key: ServiceAccountKey, lifetimeSeconds: Int64 = FleetEngineClaims.maximumLifetimeSeconds,
                clock: @escaping EpochClock = systemEpochClock) {
        self.key = key
        self.lifetimeSeconds = min(lifetimeSeconds, FleetEngineClaims.maximumLifetimeSeconds)
        self.clock = clock
    }

    public func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        let issuedAt = clock()
        let claims = FleetEngineClaims.claimsJSON(
            serviceAccount: key.clientEmail, kind: vehicle.kind,
            vehicleId: vehicle.id,
            issuedAt: issuedAt, lifetimeSeconds: lifetimeSeconds)
        guard let token = JWT.signRS256(headerJSON: FleetEngineClaims.headerJSON(keyId: key.privateKeyId),
                                        claimsJSON: claims, key: key.privateKey)
        else { throw SignerError(signer: name, reason: .signing, "RS256 signing failed in libcrypto") }
        return VehicleToken(token: token, expiresAt: issuedAt + lifetimeSeconds)
    }
}
