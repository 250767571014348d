/// Vehicle tokens, reused until `exp − refreshMargin` and then replaced.
///
/// - Single flight: concurrent requests for one vehicle share one mint (the first
///   caller starts it, the rest await the same task), so a burst of events for a
///   vehicle costs one signature, not one per event.
/// - Refresh ahead: a token requested within one more margin of its end is
///   replaced in the background while the current one is still handed out, so
///   active vehicles never wait on a mint. Each token's refresh point is drawn at
///   random within that margin, so tokens minted together (a cold start) are not
///   all replaced in the same few seconds an hour later.
/// - Bounded: beyond `capacity` entries the least recently used are evicted.
public actor TokenCache {
    private enum Entry {
        case ready(VehicleToken)
        case minting(Task<VehicleToken, any Error>)
    }

    private struct Slot {
        var entry: Entry
        var lastUsed: UInt64
        /// When a `ready` token is replaced in the background (seconds since the epoch).
        var refreshAt: Int64 = .max
        /// A background replacement under way for a `ready` token.
        var refresh: Task<VehicleToken, any Error>?
    }

    public static let defaultCapacity = 200_000

    private let signer: any VehicleTokenSigner
    private let refreshMarginSeconds: Int64
    private let wildcard: Bool
    private let capacity: Int
    private let clock: EpochClock
    private var slots: [VehicleIdentity: Slot] = [:]
    private var uses: UInt64 = 0

    public private(set) var mintCount = 0
    public private(set) var hitCount = 0
    /// Failed mints by `SignerError.Reason` (`other` for errors of other types).
    public private(set) var errorsByReason: [String: Int] = [:]

    /// - Parameters:
    ///   - wildcard: share one `"*"` token per kind across all vehicles; only when the operator configures it.
    ///   - capacity: most tokens kept; the least recently used beyond it are dropped.
    public init(signer: any VehicleTokenSigner, refreshMarginSeconds: Int64 = 300, wildcard: Bool = false,
                capacity: Int = TokenCache.defaultCapacity, clock: @escaping EpochClock = systemEpochClock) {
        self.signer = signer
        self.refreshMarginSeconds = refreshMarginSeconds
        self.wildcard = wildcard
        self.capacity = max(1, capacity)
        self.clock = clock
    }

    public var signerName: String { signer.name }
    public var count: Int { slots.count }

    /// A token valid for at least the refresh margin.
    public func token(for vehicle: VehicleIdentity) async throws -> String {
        let key = cacheKey(vehicle)
        uses += 1
        slots[key]?.lastUsed = uses
        switch slots[key]?.entry {
        case .ready(let token) where clock() < token.expiresAt - refreshMarginSeconds:
            hitCount += 1
            if clock() >= slots[key]!.refreshAt { refreshInBackground(key) }
            return token.token
        case .minting(let task):
            hitCount += 1
            return try await task.value.token
        default:
            // Expired for use: join the background replacement if one is under way.
            if let refresh = slots[key]?.refresh, let token = try? await refresh.value {
                hitCount += 1
                return token.token
            }
            return try await mint(key).token
        }
    }

    /// Drops a vehicle's token (after Fleet Engine refused it) so the next request mints anew.
    public func invalidate(_ vehicle: VehicleIdentity) {
        let key = cacheKey(vehicle)
        if case .ready = slots[key]?.entry { slots[key] = nil }
    }

    private func cacheKey(_ vehicle: VehicleIdentity) -> VehicleIdentity {
        wildcard ? VehicleIdentity(kind: vehicle.kind, id: FleetEngineClaims.wildcard) : vehicle
    }

    private func mint(_ key: VehicleIdentity) async throws -> VehicleToken {
        let signer = self.signer
        let task = Task { try await signer.mint(for: key) }
        slots[key] = Slot(entry: .minting(task), lastUsed: uses)
        mintCount += 1
        evictIfFull()
        do {
            let token = try await task.value
            setReady(key, token)
            return token
        } catch {
            slots[key] = nil
            countError(error)
            throw error
        }
    }

    private func refreshInBackground(_ key: VehicleIdentity) {
        guard slots[key] != nil, slots[key]?.refresh == nil else { return }
        let signer = self.signer
        let task = Task { try await signer.mint(for: key) }
        slots[key]?.refresh = task
        mintCount += 1
        Task {
                let result = await task.result
            self.finishRefresh(key, task, result)
        }
    }

    private func finishRefresh(_ key: VehicleIdentity, _ task: Task<VehicleToken, any Error>,
                               _ result: Result<VehicleToken, any Error>) {
        guard slots[key]?.refresh == task else { return }  // invalidated, evicted or replaced meanwhile
        slots[key]?.refresh = nil
        switch result {
        case .success(let token): setReady(key, token)
        case .failure(let error): countError(error)  // the current token stays in use while valid
        }
    }

    private func setReady(_ key: VehicleIdentity, _ token: VehicleToken) {
        guard slots[key] != nil else { return }
        slots[key]!.entry = .ready(token)
        // At least a second before the token stops being handed out (`exp − margin`): a refresh
        // point on that boundary would never be reached by a request that still gets the token.
        slots[key]!.refreshAt = token.expiresAt - refreshMarginSeconds - Int64.random(in: 1...max(1, refreshMarginSeconds))
    }

    private func countError(_ error: any Error) {
        errorsByReason[(error as? SignerError)?.reason.rawValue ?? "other", default: 0] += 1
    }

    /// Evicts the least recently used ready tokens, in batches of 1 % so that the
    /// sort is paid once per many inserts.
    private func evictIfFull() {
        guard slots.count > capacity + capacity / 100 else { return }
        let evictable = slots.filter { if case .ready = $0.value.entry { true } else { false } }
            .sorted { $0.value.lastUsed < $1.value.lastUsed }
        for (key, _) in evictable.prefix(slots.count - capacity) { slots[key] = nil }
    }
}
