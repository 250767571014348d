import FleetModel
import Metrics
import OrderedCollections
import Synchronization

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
public final class TokenCache: Sendable {
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

    /// Everything the cache knows, behind one lock. A lookup is one short critical section on
    /// the caller's thread: the relay's requests take their tokens without leaving their event
    /// loop. Signing, resuming waiters and warning happen outside it.
    private struct State {
        /// Slots stored densely beside a compact hash table of their positions (a `Dictionary`
        /// would keep every slot in its buckets, most of them empty); their order means nothing.
        var slots: OrderedDictionary<VehicleIdentity, Slot> = [:]
        /// What the token stored last shares, for the next token of the same signer to share.
        var sharedPart: SharedTokenPart?
        var uses: UInt64 = 0
        var refreshesOrdered: UInt64 = 0
        var refresherRunning = false
        var warnedAboutShortLifetime = false
    }

    /// What a lookup found for a caller to do.
    private enum Lookup {
        case hit(StoredToken, refresh: RefreshOrder?)
        case fail(any Error)
        /// Another caller's mint, or the running refresh, is under way: wait for it.
        case wait
        /// The slot is this caller's to mint (marked `minting` in the same critical section);
        /// callers of slots evicted to make room look again.
        case mint(evicted: [WaitingCallers<VehicleToken>])
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
    private let state = Mutex(State())
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
    public var count: Int { state.withLock { $0.slots.count } }
    /// Background replacements ordered or running (a walk over every token: for tests and tools).
    public var refreshesUnderWay: Int { state.withLock { $0.slots.values.reduce(0) { $0 + ($1.refresh == nil ? 0 : 1) } } }
    /// Callers waiting for another caller's mint or for a refresh (a walk over every token).
    public var callersWaiting: Int { state.withLock { $0.slots.values.reduce(0) { $0 + $1.waiters.count } } }

    /// Replaces tokens in the background until cancelled, once per cache. Its owner runs it as a
    /// child task (the relay and the replay do); without it, and after it ended, a token is
    /// replaced once it stops being handed out, by the request that needs it.
    public func runRefreshes() async {
        guard state.withLock({ state in
            defer { state.refresherRunning = true }
            return !state.refresherRunning
        }) else { return }
        defer { state.withLock { $0.refresherRunning = false } }
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
        while true {
            let now = clock()
            switch state.withLock({ look(key, now: now, in: &$0) }) {
            case .hit(let token, let refresh):
                hitsCounted.increment()
                if let refresh { orderRefresh.yield(refresh) }
                return token.issued.text
            case .fail(let error):
                throw error
            case .wait:
                switch await nextToken(of: key) {
                case .value(let token):
                    hitsCounted.increment()
                    return token.token
                case .failure(let error): throw error
                case .lookAgain: continue
                }
            case .mint(let evicted):
                for var waiters in evicted { waiters.resumeAll(.lookAgain) }
                return try await mint(key).token
            }
        }
    }

    /// The vehicle's token when one is ready to hand out, without waiting: nil when it would
    /// have to be minted or waited for (`token(for:)` then), or its last mint failed. A hit is
    /// counted and may order the token's refresh, as through `token(for:)`. The text is written
    /// out where it is sent.
    public func readyToken(for vehicle: VehicleIdentity) -> TokenText? {
        let key = cacheKey(vehicle)
        let now = clock()
        let found = state.withLock { state -> (StoredToken, RefreshOrder?)? in
            // Only a token `look` would hand out: a lookup that would mint or wait changes nothing.
            guard let index = state.slots.index(forKey: key), case .ready(let token) = state.slots.values[index].entry,
                  now < token.expiresAt - state.slots.values[index].marginSeconds else { return nil }
            state.uses += 1
            state.slots.values[index].lastUsed = state.uses
            return (token, refreshOrder(at: index, key: key, now: now, in: &state))
        }
        guard let (token, refresh) = found else { return nil }
        hitsCounted.increment()
        if let refresh { orderRefresh.yield(refresh) }
        return token.issued
    }

    /// One lookup, under the lock: what the caller does next. A slot this caller is to mint is
    /// marked `minting` here, so that the callers after it wait for this one mint.
    private func look(_ key: VehicleIdentity, now: Int64, in state: inout State) -> Lookup {
        state.uses += 1
        // One hash lookup per request: the slot is read and changed through its position.
        guard let index = state.slots.index(forKey: key) else { return beginMint(key, in: &state) }
        state.slots.values[index].lastUsed = state.uses
        let slot = state.slots.values[index]
        switch slot.entry {
        case .ready(let token) where now < token.expiresAt - slot.marginSeconds:
            return .hit(token, refresh: refreshOrder(at: index, key: key, now: now, in: &state))
        case .minting:
            return .wait
        case .failed(let error, let retryAt) where now < retryAt:
            return .fail(error)
        case .ready where Self.isRunning(slot.refresh):
            // No longer handed out, and its replacement is under way: wait for that one.
            return .wait
        default:
            return beginMint(key, in: &state)
        }
    }

    /// The refresh a hit on the slot at `index` orders: once its refresh point passed, unless
    /// one is ordered or running already.
    private func refreshOrder(at index: Int, key: VehicleIdentity, now: Int64, in state: inout State) -> RefreshOrder? {
        guard now >= state.slots.values[index].refreshAt, state.slots.values[index].refresh == nil else { return nil }
        state.refreshesOrdered += 1
        state.slots.values[index].refresh = .ordered(state.refreshesOrdered)
        return RefreshOrder(key: key, number: state.refreshesOrdered)
    }

    /// Marks the slot `minting` for the caller that looked.
    private func beginMint(_ key: VehicleIdentity, in state: inout State) -> Lookup {
        let (failures, waiters) = (state.slots[key]?.failures ?? 0, state.slots[key]?.waiters ?? WaitingCallers())
        state.slots[key] = Slot(entry: .minting, lastUsed: state.uses, waiters: waiters, failures: failures)
        return .mint(evicted: evictIfFull(&state))
    }

    /// Drops a vehicle's token after Fleet Engine refused it, so the next request mints anew;
    /// only if it is still the refused one (with wildcard tokens, many requests refused with one
    /// old token must not each throw away the new one).
    public func invalidate(_ vehicle: VehicleIdentity, refused: String) {
        let key = cacheKey(vehicle)
        var waiters = state.withLock { state -> WaitingCallers<VehicleToken> in
            guard case .ready(let token) = state.slots[key]?.entry, token.issued.text == refused else { return WaitingCallers() }
            return Self.removeSlot(key, from: &state)
        }
        waiters.resumeAll(.lookAgain)
    }

    private func cacheKey(_ vehicle: VehicleIdentity) -> VehicleIdentity {
        wildcard ? VehicleIdentity(kind: vehicle.kind, id: FleetEngineClaims.wildcard) : vehicle
    }

    /// Waits for the mint or refresh under way. It may have ended between the lookup and this
    /// wait: then the caller looks again rather than waiting for nothing.
    private func nextToken(of key: VehicleIdentity) async -> WaitingCallers<VehicleToken>.Outcome {
        await withCheckedContinuation { continuation in
            let waiting = state.withLock { state -> Bool in
                guard let slot = state.slots[key] else { return false }
                switch slot.entry {
                case .minting: break
                case .ready where Self.isRunning(slot.refresh): break
                default: return false
                }
                state.slots[key]!.waiters.append(continuation)
                return true
            }
            if !waiting { continuation.resume(returning: .lookAgain) }
        }
    }

    /// Mints in the caller's task for a slot `look` marked `minting`; callers arriving
    /// meanwhile wait for its outcome.
    private func mint(_ key: VehicleIdentity) async throws -> VehicleToken {
        mintsCounted.increment()
        do {
            let token = try await Self.signOffTheCallersExecutor(signer, key)
            var (waiters, warning) = state.withLock { state in
                let warning = setReady(key, token, in: &state)
                return (Self.takeWaiters(key, from: &state), warning)
            }
            if let warning { warn(warning) }
            waiters.resumeAll(.value(token))
            return token
        } catch {
            if Task.isCancelled {
                // This caller was cancelled (a revoke, a shutdown): nothing learnt about the signer.
                var waiters = state.withLock { Self.removeSlot(key, from: &$0) }
                waiters.resumeAll(.lookAgain)
                throw error
            }
            countError(error)
            let now = clock()
            var waiters = state.withLock { state -> WaitingCallers<VehicleToken> in
                guard state.slots[key] != nil else { return WaitingCallers() }
                state.slots[key]!.failures += 1
                state.slots[key]!.entry = .failed(error, retryAt: now + Self.backoffSeconds(failures: state.slots[key]!.failures))
                return Self.takeWaiters(key, from: &state)
            }
            waiters.resumeAll(.failure(error))
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

    /// One background replacement, in the refresher's task; the current token stays in use meanwhile.
    private func refresh(_ order: RefreshOrder) async {
        let key = order.key
        let begun = state.withLock { state -> Bool in
            guard state.slots[key]?.refresh == .ordered(order.number) else { return false }  // its token is gone
            state.slots[key]!.refresh = .running(order.number)
            return true
        }
        guard begun else { return }
        mintsCounted.increment()
        let result: Result<VehicleToken, any Error>
        do {
            result = .success(try await signer.mint(for: key))
        } catch {
            result = .failure(error)
        }
        let cancelled = Task.isCancelled
        if case .failure(let error) = result, !cancelled { countError(error) }
        let now = clock()
        let ended = state.withLock { state -> (WaitingCallers<VehicleToken>, String?)? in
            guard state.slots[key]?.refresh == .running(order.number) else { return nil }  // invalidated or evicted meanwhile
            state.slots[key]!.refresh = nil
            switch result {
            case .success(let token):
                let warning = setReady(key, token, in: &state)
                return (Self.takeWaiters(key, from: &state), warning)
            case .failure:
                if !cancelled {
                    state.slots[key]!.failures += 1
                    state.slots[key]!.refreshAt = now + Self.backoffSeconds(failures: state.slots[key]!.failures)
                }
                return (Self.takeWaiters(key, from: &state), nil)
            }
        }
        guard case (var waiters, let warning)? = ended else { return }
        if let warning { warn(warning) }
        switch result {
        case .success(let token): waiters.resumeAll(.value(token))
        case .failure: waiters.resumeAll(.lookAgain)  // they mint themselves; the next refresh waits out the backoff
        }
    }

    /// Stores a minted token as ready; returns the warning to give when tokens live too short
    /// for the margin (the first time only).
    private func setReady(_ key: VehicleIdentity, _ token: VehicleToken, in state: inout State) -> String? {
        guard state.slots[key] != nil else { return nil }
        let (margin, warning) = margin(forLifetime: token.expiresAt - clock(), in: &state)
        let stored = StoredToken(token, sharing: state.sharedPart)
        state.sharedPart = stored.shared ?? state.sharedPart
        state.slots[key]!.entry = .ready(stored)
        state.slots[key]!.failures = 0
        state.slots[key]!.marginSeconds = margin
        // At least a second before the token stops being handed out (`exp − margin`): a refresh
        // point on that boundary would never be reached by a request that still gets the token.
        state.slots[key]!.refreshAt = token.expiresAt - margin - Int64.random(in: 1...max(1, margin))
        return warning
    }

    private static func takeWaiters(_ key: VehicleIdentity, from state: inout State) -> WaitingCallers<VehicleToken> {
        guard state.slots[key] != nil else { return WaitingCallers() }
        defer { state.slots[key]!.waiters = WaitingCallers() }
        return state.slots[key]!.waiters
    }

    /// Forgets a slot; returns its waiters, to look again.
    private static func removeSlot(_ key: VehicleIdentity, from state: inout State) -> WaitingCallers<VehicleToken> {
        guard let index = state.slots.index(forKey: key) else { return WaitingCallers() }
        // The last slot takes its place: removing from the middle would move every slot after it.
        state.slots.swapAt(index, state.slots.count - 1)
        return state.slots.removeLast().value.waiters
    }

    /// The configured margin, or a third of the token's lifetime when that is shorter (and the
    /// warning about it, the first time).
    private func margin(forLifetime lifetime: Int64, in state: inout State) -> (Int64, String?) {
        guard lifetime < 3 * refreshMarginSeconds else { return (refreshMarginSeconds, nil) }
        let scaled = max(1, lifetime / 3)
        guard !state.warnedAboutShortLifetime else { return (scaled, nil) }
        state.warnedAboutShortLifetime = true
        return (scaled, "Tokens from the \(signer.name) signer live \(lifetime) s, less than three times --token-refresh-margin (\(refreshMarginSeconds) s): each is replaced \(scaled) s before it expires instead")
    }

    private func countError(_ error: any Error) {
        errorsCounted[(error as? SignerError)?.reason.rawValue ?? "other"]?.increment()
    }

    /// Evicts the least recently used tokens (and remembered failures), in batches of 1 % so that the
    /// sort is paid once per many inserts. Returns the waiters of the slots evicted, to look again.
    private func evictIfFull(_ state: inout State) -> [WaitingCallers<VehicleToken>] {
        guard state.slots.count > capacity + capacity / 100 else { return [] }
        let evictable = state.slots.filter { if case .minting = $0.value.entry { false } else { true } }
            .sorted { $0.value.lastUsed < $1.value.lastUsed }
        return evictable.prefix(state.slots.count - capacity).map { Self.removeSlot($0.key, from: &state) }
    }
}
