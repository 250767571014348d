/// Vehicle tokens, reused until `exp − refreshMargin` and then replaced.
///
/// Concurrent requests for one vehicle share a single mint (the first caller
/// starts it, the rest await the same task), so a burst of events for a vehicle
/// costs one signature, not one per event.
public actor TokenCache {
    private enum Entry {
        case ready(VehicleToken)
        case minting(Task<VehicleToken, any Error>)
    }

    private let signer: any VehicleTokenSigner
    private let refreshMarginSeconds: Int64
    private let wildcard: Bool
    private let clock: EpochClock
    private var entries: [VehicleIdentity: Entry] = [:]

    public private(set) var mintCount = 0
    public private(set) var hitCount = 0
    public private(set) var errorCount = 0

    /// - Parameters:
    ///   - wildcard: share one `"*"` token per kind across all vehicles; only when the operator configures it.
    public init(signer: any VehicleTokenSigner, refreshMarginSeconds: Int64 = 300, wildcard: Bool = false,
                clock: @escaping EpochClock = systemEpochClock) {
        self.signer = signer
        self.refreshMarginSeconds = refreshMarginSeconds
        self.wildcard = wildcard
        self.clock = clock
    }

    public var signerName: String { signer.name }
    public var count: Int { entries.count }

    /// A token valid for at least the refresh margin.
    public func token(for vehicle: VehicleIdentity) async throws -> String {
        let key = wildcard ? VehicleIdentity(kind: vehicle.kind, id: FleetEngineClaims.wildcard) : vehicle
        switch entries[key] {
        case .ready(let token) where clock() < token.expiresAt - refreshMarginSeconds:
            hitCount += 1
            return token.token
        case .minting(let task):
            hitCount += 1
            return try await task.value.token
        default:
            return try await mint(key).token
        }
    }

    /// Drops a vehicle's token (after Fleet Engine refused it) so the next request mints anew.
    public func invalidate(_ vehicle: VehicleIdentity) {
        let key = wildcard ? VehicleIdentity(kind: vehicle.kind, id: FleetEngineClaims.wildcard) : vehicle
        if case .ready = entries[key] { entries[key] = nil }
    }

    private func mint(_ key: VehicleIdentity) async throws -> VehicleToken {
        let signer = self.signer
        let task = Task { try await signer.mint(for: key) }
        entries[key] = .minting(task)
        mintCount += 1
        do {
            let token = try await task.value
            entries[key] = .ready(token)
            return token
        } catch {
            entries[key] = nil
            errorCount += 1
            throw error
        }
    }
}
