import FleetModel
import Metrics
import OrderedCollections

/// Vehicle tokens, reused until `exp − refreshMargin` and then replaced.
///
/// - Single flight: concurrent requests for one vehicle share one mint (the first
///   caller mints in its own task, the rest wait for its outcome), so a burst of events
///   for a vehicle costs one signature, not one per event.
/// - Refresh ahead: a token requested within one more margin of its end is
///   replaced in the background (`runRefreshes`) while the current one is still handed out, so
///   active vehicles never wait on a mint. Each token's refresh point is drawn at
///   random within that margin, so tokens minted together (a cold start) are not
///   all replaced in the same few seconds an hour later.
/// - Backoff: after a failed mint the vehicle's callers get that failure without
///   minting again until a delay (1 s, doubling up to 30 s) has passed, and a failed
///   background refresh is retried after the same delay; during a signer outage that
///   is one call per vehicle per delay, not one per Fleet Engine request.
/// - Short-lived tokens: the margin is at most a third of a token's lifetime, so a
///   token service issuing 5-minute tokens with the default 300 s margin still has each
///   token used for minutes rather than minted again on every request (warned once).
/// - Bounded: beyond `capacity` entries the least recently used are evicted.
public actor TokenCache {
    private enum Entry {
        case ready(StoredToken)
        /// A caller is minting; the slot's waiters get its token.
        case minting
        /// The last mint failed: its callers get this error until `retryAt` (seconds since the epoch).
        case failed(any Error, retryAt: Int64)
    }

    /// A background replacement of a `ready` token, by number, so that one ordered for a token
    /// since dropped cannot land on its successor.
    private enum Refresh: Equatable {
        case ordered(UInt64)
        case running(UInt64)
    }

    private struct RefreshOrder: Sendable {
        let key: VehicleIdentity
        let number: UInt64
    }

    private struct Slot {
        var entry: Entry
        var lastUsed: UInt64
        /// The `ready` token stops being handed out this many seconds before its `exp`.
        var marginSeconds: Int64 = 0
        /// When a `ready` token is replaced in the background (seconds since the epoch).
        var refreshAt: Int64 = .max
        var refresh: Refresh?
        /// Callers waiting for the mint or the running refresh.
        var waiters = WaitingCallers<VehicleToken>()
        /// Mints and refreshes that failed in a row: the backoff grows with them.
        var failures = 0
    }

    /// The longest wait before minting again after failures.
    public static let maximumBackoffSeconds: Int64 = 30

    public static let defaultCapacity = 200_000

    private let signer: any VehicleTokenSigner
    private let refreshMarginSeconds: Int64
    private let wildcard: Bool
    private let capacity: Int
    private let clock: EpochClock
    private let warn: @Sendable (String) -> Void
    private var warnedAboutShortLifetime = false
    /// Slots stored densely beside a compact hash table of their positions (a `Dictionary` would
    /// keep every slot in its buckets, most of them empty); their order means nothing.
    private var slots: OrderedDictionary<VehicleIdentity, Slot> = [:]
    /// What the token stored last shares, for the next token of the same signer to share.
    private var sharedPart: SharedTokenPart?
    private var uses: UInt64 = 0
    private var refreshesOrdered: UInt64 = 0
    private var refresherRunning = false
    private let refreshOrders: AsyncStream<RefreshOrder>
    private let orderRefresh: AsyncStream<RefreshOrder>.Continuation

    /// Tokens minted, handed out from the cache, and failed mints by `SignerError.Reason`
    /// (`other` for errors of other types): made once, counted where they happen.
    private let mintsCounted: Counter
    private let hitsCounted: Counter
    private let errorsCounted: [String: Counter]

    /// - Parameters:
    ///   - wildcard: share one `"*"` token per kind across all vehicles; only when the operator configures it.
    ///   - capacity: most tokens kept; the least recently used beyond it are dropped.
    ///   - warn: told once when tokens live too short for the configured margin.
    ///   - metrics: where the counters go (tests pass their own).
    public init(signer: any VehicleTokenSigner, refreshMarginSeconds: Int64 = 300, wildcard: Bool = false,
                capacity: Int = TokenCache.defaultCapacity, clock: @escaping EpochClock = systemEpochClock,
                warn: @escaping @Sendable (String) -> Void = { _ in }, metrics: any MetricsFactory = MetricsSystem.factory) {
        self.signer = signer
        self.refreshMarginSeconds = refreshMarginSeconds
        self.wildcard = wildcard
        self.capacity = max(1, capacity)
        self.clock = clock
        self.warn = warn
        let signerLabel = ("signer", signer.name)
        mintsCounted = Counter(label: "fleet_relay_tokens_minted_total", dimensions: [signerLabel], factory: metrics)
        hitsCounted = Counter(label: "fleet_relay_token_cache_hits_total", factory: metrics)
        errorsCounted = Dictionary(uniqueKeysWithValues: (SignerError.Reason.allCases.map(\.rawValue) + ["other"]).map {
            ($0, Counter(label: "fleet_relay_token_errors_total", dimensions: [signerLabel, ("reason", $0)], factory: metrics))
        })
        // At most one order per cached token is outstanding; without a refresher the oldest go.
        (refreshOrders, orderRefresh) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(max(1, capacity)))
    }

    public var signerName: String { signer.name }
    public var count: Int { slots.count }
    /// Background replacements ordered or running (a walk over every token: for tests and tools).
    public var refreshesUnderWay: Int { slots.values.reduce(0) { $0 + ($1.refresh == nil ? 0 : 1) } }
    /// Callers waiting for another caller's mint or for a refresh (a walk over every token).
    public var callersWaiting: Int { slots.values.reduce(0) { $0 + $1.waiters.count } }

    /// Replaces tokens in the background until cancelled, once per cache. Its owner runs it as a
    /// child task (the relay and the replay do); without it, and after it ended, a token is
    /// replaced once it stops being handed out, by the request that needs it.
    public func runRefreshes() async {
        guard !refresherRunning else { return }
        refresherRunning = true
        defer { refresherRunning = false }
        await withDiscardingTaskGroup { refreshes in
            for await order in refreshOrders {
                refreshes.addTask { await self.refresh(order) }
            }
        }
    }

    /// A token valid for at least the refresh margin. Throws the signer's error, also while
    /// backing off after a failed mint.
    public func token(for vehicle: VehicleIdentity) async throws -> String {
        let key = cacheKey(vehicle)
        uses += 1
        while true {
            slots[key]?.lastUsed = uses
            let now = clock()
            switch slots[key]?.entry {
            case .ready(let token) where now < token.expiresAt - slots[key]!.marginSeconds:
                hitsCounted.increment()
                if now >= slots[key]!.refreshAt { orderRefreshIfNone(key) }
                return token.text
            case .minting:
                switch await nextToken(of: key) {
                case .value(let token):
                    hitsCounted.increment()
                    return token.token
                case .failure(let error): throw error
                case .lookAgain: continue
                }
            case .failed(let error, let retryAt) where now < retryAt:
                throw error
            case .ready where Self.isRunning(slots[key]!.refresh):
                // No longer handed out, and its replacement is under way: wait for that one.
                if case .value(let token) = await nextToken(of: key) {
                    hitsCounted.increment()
                    return token.token
                }
            default:
                return try await mint(key).token
            }
        }
    }

    /// Drops a vehicle's token after Fleet Engine refused it, so the next request mints anew;
    /// only if it is still the refused one (with wildcard tokens, many requests refused with one
    /// old token must not each throw away the new one).
    public func invalidate(_ vehicle: VehicleIdentity, refused: String) {
        let key = cacheKey(vehicle)
        if case .ready(let token) = slots[key]?.entry, token.text == refused { removeSlot(key) }
    }

    private func cacheKey(_ vehicle: VehicleIdentity) -> VehicleIdentity {
        wildcard ? VehicleIdentity(kind: vehicle.kind, id: FleetEngineClaims.wildcard) : vehicle
    }

    private func nextToken(of key: VehicleIdentity) async -> WaitingCallers<VehicleToken>.Outcome {
        await withCheckedContinuation { continuation in
            if slots[key] != nil {
                slots[key]!.waiters.append(continuation)
            } else {
                continuation.resume(returning: .lookAgain)
            }
        }
    }

    /// Mints in the caller's task; callers arriving meanwhile wait for its outcome.
    private func mint(_ key: VehicleIdentity) async throws -> VehicleToken {
        let (failures, waiters) = (slots[key]?.failures ?? 0, slots[key]?.waiters ?? WaitingCallers())
        slots[key] = Slot(entry: .minting, lastUsed: uses, waiters: waiters, failures: failures)
        mintsCounted.increment()
        evictIfFull()
        do {
            let token = try await Self.signOffTheCallersExecutor(signer, key)
            setReady(key, token)
            slots[key]?.waiters.resumeAll(.value(token))
            return token
        } catch {
            if Task.isCancelled {
                // This caller was cancelled (a revoke, a shutdown): nothing learnt about the signer.
                removeSlot(key)
                throw error
            }
            countError(error)
            if slots[key] != nil {
                slots[key]!.failures += 1
                slots[key]!.entry = .failed(error, retryAt: clock() + Self.backoffSeconds(failures: slots[key]!.failures))
                slots[key]!.waiters.resumeAll(.failure(error))
            }
            throw error
        }
    }

    /// Signs on the global concurrent executor, whatever executor the caller's task prefers: the
    /// relay's workers run on the event loops that carry their connections, and an RS256
    /// signature (about 0.4 ms) there would stall every connection of that loop meanwhile. A
    /// cold start's signatures spread over the cores instead.
    private static func signOffTheCallersExecutor(_ signer: any VehicleTokenSigner,
                                                  _ key: VehicleIdentity) async throws -> VehicleToken {
        try await withTaskExecutorPreference(globalConcurrentExecutor) { try await signer.mint(for: key) }
    }

    /// 1 s after the first failure, doubling, at most `maximumBackoffSeconds`.
    static func backoffSeconds(failures: Int) -> Int64 {
        min(maximumBackoffSeconds, Int64(1) << Int64(min(max(failures - 1, 0), 16)))
    }

    private static func isRunning(_ refresh: Refresh?) -> Bool {
        if case .running = refresh { true } else { false }
    }

    private func orderRefreshIfNone(_ key: VehicleIdentity) {
        guard slots[key]?.refresh == nil else { return }
        refreshesOrdered += 1
        slots[key]!.refresh = .ordered(refreshesOrdered)
        orderRefresh.yield(RefreshOrder(key: key, number: refreshesOrdered))
    }

    /// One background replacement, in the refresher's task; the current token stays in use meanwhile.
    private func refresh(_ order: RefreshOrder) async {
        let key = order.key
        guard slots[key]?.refresh == .ordered(order.number) else { return }  // its token is gone
        slots[key]!.refresh = .running(order.number)
        mintsCounted.increment()
        let result: Result<VehicleToken, any Error>
        do {
            result = .success(try await signer.mint(for: key))
        } catch {
            result = .failure(error)
        }
        guard slots[key]?.refresh == .running(order.number) else { return }  // invalidated or evicted meanwhile
        slots[key]!.refresh = nil
        switch result {
        case .success(let token):
            setReady(key, token)
            slots[key]!.waiters.resumeAll(.value(token))
        case .failure(let error):
            // Callers waiting for it mint themselves; the next refresh waits out the backoff.
            slots[key]!.waiters.resumeAll(.lookAgain)
            guard !Task.isCancelled else { return }
            countError(error)
            slots[key]!.failures += 1
            slots[key]!.refreshAt = clock() + Self.backoffSeconds(failures: slots[key]!.failures)
        }
    }

    private func setReady(_ key: VehicleIdentity, _ token: VehicleToken) {
        guard slots[key] != nil else { return }
        let margin = margin(forLifetime: token.expiresAt - clock())
        let stored = StoredToken(token, sharing: sharedPart)
        sharedPart = stored.shared ?? sharedPart
        slots[key]!.entry = .ready(stored)
        slots[key]!.failures = 0
        slots[key]!.marginSeconds = margin
        // At least a second before the token stops being handed out (`exp − margin`): a refresh
        // point on that boundary would never be reached by a request that still gets the token.
        slots[key]!.refreshAt = token.expiresAt - margin - Int64.random(in: 1...max(1, margin))
    }

    /// Forgets a slot; callers waiting on it look again.
    private func removeSlot(_ key: VehicleIdentity) {
        guard let index = slots.index(forKey: key) else { return }
        // The last slot takes its place: removing from the middle would move every slot after it.
        slots.swapAt(index, slots.count - 1)
        var removed = slots.removeLast().value
        removed.waiters.resumeAll(.lookAgain)
    }

    /// The configured margin, or a third of the token's lifetime when that is shorter.
    private func margin(forLifetime lifetime: Int64) -> Int64 {
        guard lifetime < 3 * refreshMarginSeconds else { return refreshMarginSeconds }
        let scaled = max(1, lifetime / 3)
        if !warnedAboutShortLifetime {
            warnedAboutShortLifetime = true
            warn("Tokens from the \(signer.name) signer live \(lifetime) s, less than three times --token-refresh-margin (\(refreshMarginSeconds) s): each is replaced \(scaled) s before it expires instead")
        }
        return scaled
    }

    private func countError(_ error: any Error) {
        errorsCounted[(error as? SignerError)?.reason.rawValue ?? "other"]?.increment()
    }

    /// Evicts the least recently used tokens (and remembered failures), in batches of 1 % so that the
    /// sort is paid once per many inserts.
    private func evictIfFull() {
        guard slots.count > capacity + capacity / 100 else { return }
        let evictable = slots.filter { if case .minting = $0.value.entry { false } else { true } }
            .sorted { $0.value.lastUsed < $1.value.lastUsed }
        for (key, _) in evictable.prefix(slots.count - capacity) { removeSlot(key) }
    }
}
