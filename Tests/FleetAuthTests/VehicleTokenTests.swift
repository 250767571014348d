import FleetAuth
import FleetModel
import JSON
import MetricsTestKit
import Synchronization
import Testing

@Suite struct VehicleTokenTests {
    @Test(arguments: [(VehicleKind.vehicle, "vehicleid"), (.deliveryVehicle, "deliveryvehicleid")])
    func mintsTheClaimsJWTMdDescribes(kind: VehicleKind, claim: String) async throws {
        let signer = LocalKeySigner(key: TestKeys.key, clock: { 1_795_381_200 })
        let minted = try await signer.mint(for: VehicleIdentity(kind: kind, id: "veh-1"))
        let parts = try JWT.decode(minted.token)
        #expect(parts.header == .object(["alg": .string("RS256"), "typ": .string("JWT"), "kid": .string("test-kid")]))
        #expect(parts.claims == .object([
            "iss": .string(TestKeys.key.clientEmail), "sub": .string(TestKeys.key.clientEmail),
            "aud": .string("https://fleetengine.googleapis.com/"),
            "iat": .number(1_795_381_200), "exp": .number(1_795_384_800),
            "authorization": .object([claim: .string("veh-1")]),
        ]))
        #expect(minted.expiresAt == 1_795_384_800)
        let publicKey = try #require(RSAKey(publicKeyPEM: TestKeys.key.privateKey.publicKeyPEM))
        #expect(publicKey.verifySHA256(parts.signingInput, signature: parts.signature))
        var tampered = parts.signingInput
        tampered[tampered.count - 1] ^= 1
        #expect(!publicKey.verifySHA256(tampered, signature: parts.signature))
    }

    @Test func lifetimeNeverExceedsOneHour() async throws {
        let signer = LocalKeySigner(key: TestKeys.key, lifetimeSeconds: 7200, clock: { 1000 })
        let minted = try await signer.mint(for: VehicleIdentity(kind: .vehicle, id: "v"))
        #expect(minted.expiresAt == 4600)
        #expect(try JWT.decode(minted.token).claims["exp"] == .number(4600))
    }

    @Test func descriptionsNeverContainTheToken() async throws {
        let minted = try await LocalKeySigner(key: TestKeys.key).mint(for: VehicleIdentity(kind: .vehicle, id: "v"))
        #expect(!"\(minted)".contains(minted.token.prefix(20)))
    }
}

/// Counts mints and can be slowed down, to observe the cache.
final class CountingSigner: VehicleTokenSigner {
    let name = "counting"
    let mints = Atomic<Int>(0)
    /// Every mint fails with `unavailable` while set.
    let failing = Atomic<Bool>(false)
    /// Every mint takes an hour (or until its caller is cancelled) while set.
    let hanging = Atomic<Bool>(false)
    let clock: EpochClock
    let lifetime: Int64

    init(clock: @escaping EpochClock, lifetime: Int64 = 3600) {
        self.clock = clock
        self.lifetime = lifetime
    }

    func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
        mints.add(1, ordering: .relaxed)
        try await Task.sleep(for: hanging.load(ordering: .relaxed) ? .seconds(3600) : .milliseconds(50))  // a mint in progress while others ask
        if failing.load(ordering: .relaxed) { throw SignerError(signer: name, reason: .unavailable, "signer down") }
        return VehicleToken(token: "token-\(vehicle.id)-\(mints.load(ordering: .relaxed))", expiresAt: clock() + lifetime)
    }
}

/// Waits for `condition` with a generous deadline.
func eventually(_ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(60)
    while try await !condition() {
        guard ContinuousClock.now < deadline else { Issue.record("condition not met within 60 s"); return }
        try await Task.sleep(for: .milliseconds(10))
    }
}

final class ManualClock: Sendable {
    let now = Atomic<Int64>(1_000_000)
    var epochClock: EpochClock { { [self] in now.load(ordering: .relaxed) } }
}

/// A cache over a counting signer, both on a manual clock (refresh margin 300 s).
func countingCache(capacity: Int = TokenCache.defaultCapacity, metrics: TestMetrics = TestMetrics())
    -> (ManualClock, CountingSigner, TokenCache) {
    let clock = ManualClock()
    let signer = CountingSigner(clock: clock.epochClock)
    return (clock, signer, TokenCache(signer: signer, refreshMarginSeconds: 300, capacity: capacity, clock: clock.epochClock, metrics: metrics))
}

/// What the cache counted into `fleet_relay_token_errors_total` for `reason`.
func signerErrors(_ metrics: TestMetrics, reason: String) -> Int64 {
    metrics.counters(label: "fleet_relay_token_errors_total").filter { $0.dimensions.contains { $0 == ("reason", reason) } }
        .reduce(0) { $0 + $1.totalValue }
}

/// Runs `body` while the cache's background refresher runs.
func withRefresher<T: Sendable>(_ cache: TokenCache, _ body: () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await cache.runRefreshes() }
        defer { group.cancelAll() }
        return try await body()
    }
}

@Suite struct TokenCacheTests {
    @Test func hundredConcurrentRequestsForOneVehicleMintOnce() async throws {
        let (_, signer, cache) = countingCache()
        let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-1")
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<100 { group.addTask { try await cache.token(for: vehicle) } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(signer.mints.load(ordering: .relaxed) == 1)
        #expect(tokens.count == 1)
    }

    @Test func reusesUntilTheRefreshMarginThenReplaces() async throws {
        let (clock, signer, cache) = countingCache()
        let vehicle = VehicleIdentity(kind: .deliveryVehicle, id: "d-1")
        let first = try await cache.token(for: vehicle)
        clock.now.add(3600 - 301, ordering: .relaxed)
        #expect(try await cache.token(for: vehicle) == first)
        clock.now.add(1, ordering: .relaxed)
        let second = try await cache.token(for: vehicle)
        #expect(second != first)
        #expect(signer.mints.load(ordering: .relaxed) == 2)
    }

    @Test func keepsOneTokenPerVehicleAndKind() async throws {
        let (_, signer, cache) = countingCache()
        for id in ["a", "b", "a", "b"] {
            _ = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: id))
        }
        _ = try await cache.token(for: VehicleIdentity(kind: .deliveryVehicle, id: "a"))
        #expect(signer.mints.load(ordering: .relaxed) == 3)
        #expect(cache.count == 3)
    }

    @Test func invalidationForcesANewMint() async throws {
        let (_, signer, cache) = countingCache()
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        let first = try await cache.token(for: vehicle)
        cache.invalidate(vehicle, refused: first)
        #expect(try await cache.token(for: vehicle) != first)
        #expect(signer.mints.load(ordering: .relaxed) == 2)
    }

    /// With a wildcard token many requests in flight are refused with the same old token; the
    /// first invalidation makes a new one, and the later ones must not throw that away.
    @Test func invalidationDropsOnlyTheRefusedToken() async throws {
        let clock = ManualClock()
        let signer = CountingSigner(clock: clock.epochClock)
        let cache = TokenCache(signer: signer, wildcard: true, clock: clock.epochClock)
        let old = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "a"))
        cache.invalidate(VehicleIdentity(kind: .vehicle, id: "a"), refused: old)
        let new = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "b"))
        for id in ["b", "c", "d"] { cache.invalidate(VehicleIdentity(kind: .vehicle, id: id), refused: old) }
        #expect(try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "e")) == new)
        #expect(signer.mints.load(ordering: .relaxed) == 2)
    }

    @Test func aFailingSignerIsAskedOncePerVehicleAndBackoff() async throws {
        let clock = ManualClock()
        let signer = CountingSigner(clock: clock.epochClock)
        let metrics = TestMetrics()
        let cache = TokenCache(signer: signer, clock: clock.epochClock, metrics: metrics)
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        signer.failing.store(true, ordering: .relaxed)
        func burst() async -> Int {
            await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<100 { group.addTask { (try? await cache.token(for: vehicle)) == nil } }
                return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
        }
        #expect(await burst() == 100)
        #expect(signer.mints.load(ordering: .relaxed) == 1, "one mint for a burst, failing or not")
        #expect(await burst() == 100)
        #expect(signer.mints.load(ordering: .relaxed) == 1, "no second mint within the first second")
        for (wait, attempt) in [(1, 2), (1, 2), (1, 3), (3, 3), (1, 4)] as [(Int64, Int)] {
            clock.now.add(wait, ordering: .relaxed)  // backoff 1 s, then 2 s, then 4 s
            _ = await burst()
            #expect(signer.mints.load(ordering: .relaxed) == attempt, "after \(wait) s more")
        }
        signer.failing.store(false, ordering: .relaxed)
        clock.now.add(8, ordering: .relaxed)
        #expect(await burst() == 0)
        #expect(signer.mints.load(ordering: .relaxed) == 5)
        #expect(signerErrors(metrics, reason: "unavailable") == 4)
    }

    @Test func aFailedBackgroundRefreshWaitsOutItsBackoffWhileTheTokenStaysInUse() async throws {
        let metrics = TestMetrics()
        let (clock, signer, cache) = countingCache(metrics: metrics)
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        let first = try await cache.token(for: vehicle)
        signer.failing.store(true, ordering: .relaxed)
        clock.now.add(3600 - 301, ordering: .relaxed)  // past every refresh point, still handed out
        try await withRefresher(cache) {
            for _ in 0..<50 { #expect(try await cache.token(for: vehicle) == first) }
            try await eventually { signerErrors(metrics, reason: "unavailable") == 1 }
            for _ in 0..<50 { #expect(try await cache.token(for: vehicle) == first) }
        }
        #expect(signer.mints.load(ordering: .relaxed) == 2, "one refresh attempt, not one per request")
    }

    @Test func tokensShorterThanThreeMarginsUseAThirdOfTheirLifetimeAndWarnOnce() async throws {
        let clock = ManualClock()
        let signer = CountingSigner(clock: clock.epochClock, lifetime: 300)
        let warnings = Mutex<[String]>([])
        let cache = TokenCache(signer: signer, refreshMarginSeconds: 300, clock: clock.epochClock,
                               warn: { warning in warnings.withLock { $0.append(warning) } })
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        let first = try await cache.token(for: vehicle)
        clock.now.add(99, ordering: .relaxed)  // before every refresh point (exp − 200 at the earliest)
        for _ in 0..<20 { #expect(try await cache.token(for: vehicle) == first) }
        #expect(signer.mints.load(ordering: .relaxed) == 1, "a 5-minute token is reused, not minted per request")
        clock.now.add(101, ordering: .relaxed)  // exp − 100: no longer handed out
        let second = try await cache.token(for: vehicle)
        #expect(second != first)
        _ = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "w"))
        #expect(warnings.withLock { $0 } == [
            "Tokens from the counting signer live 300 s, less than three times --token-refresh-margin (300 s): each is replaced 100 s before it expires instead",
        ])
    }

    @Test func wildcardSharesOneTokenPerKindOnlyWhenConfigured() async throws {
        let key = TestKeys.key
        let cache = TokenCache(signer: LocalKeySigner(key: key), wildcard: true)
        let a = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "a"))
        let b = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "b"))
        #expect(a == b)
        #expect(try JWT.decode(a).claims["authorization"] == .object(["vehicleid": .string("*")]))
        let perVehicle = TokenCache(signer: LocalKeySigner(key: key))
        let c = try await perVehicle.token(for: VehicleIdentity(kind: .vehicle, id: "c"))
        #expect(try JWT.decode(c).claims["authorization"] == .object(["vehicleid": .string("c")]))
    }

    @Test func activeVehiclesGetTheirTokenRefreshedInTheBackground() async throws {
        let (clock, signer, cache) = countingCache()
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        let first = try await cache.token(for: vehicle)
        // The last second the token is handed out (exp − margin − 1): past every refresh point,
        // which lie from exp − 2 × margin to exp − margin − 1.
        clock.now.add(3600 - 301, ordering: .relaxed)
        try await withRefresher(cache) {
            #expect(try await cache.token(for: vehicle) == first, "the current token is handed out without waiting")
            try await eventually { try await cache.token(for: vehicle) != first }
        }
        #expect(signer.mints.load(ordering: .relaxed) == 2, "one background refresh, however many requests")
    }

    /// The caller minting is cancelled (its request was revoked): the callers waiting for its
    /// token are not failed with its cancellation; one of them mints instead.
    @Test func aCancelledMintHandsOverToTheCallersWaitingForIt() async throws {
        let metrics = TestMetrics()
        let (_, signer, cache) = countingCache(metrics: metrics)
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        signer.hanging.store(true, ordering: .relaxed)
        let first = Task { try await cache.token(for: vehicle) }
        try await eventually { signer.mints.load(ordering: .relaxed) == 1 }
        let waiting = Task {
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<10 { group.addTask { try await cache.token(for: vehicle) } }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
        }
        try await eventually { cache.callersWaiting == 10 }
        signer.hanging.store(false, ordering: .relaxed)
        first.cancel()
        await #expect(throws: CancellationError.self) { try await first.value }
        let tokens = try await waiting.value
        #expect(tokens.count == 1, "the waiters share one new token")
        #expect(signer.mints.load(ordering: .relaxed) == 2)
        #expect(metrics.counterTotal(label: "fleet_relay_token_errors_total") == 0, "a cancellation is no signer failure")
    }

    /// Nobody runs the refresher (a one-off command): a token is still replaced, by the first
    /// request after it stops being handed out.
    @Test func withoutARefresherATokenIsReplacedWhenItStopsBeingHandedOut() async throws {
        let (clock, signer, cache) = countingCache()
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v")
        let first = try await cache.token(for: vehicle)
        clock.now.add(3600 - 301, ordering: .relaxed)  // past every refresh point: ordered, never run
        #expect(try await cache.token(for: vehicle) == first)
        clock.now.add(1, ordering: .relaxed)
        #expect(try await cache.token(for: vehicle) != first)
        #expect(signer.mints.load(ordering: .relaxed) == 2)
    }

    @Test func tokensMintedTogetherAreRefreshedAtSpreadOutTimes() async throws {
        let (clock, signer, cache) = countingCache()
        let vehicles = (0..<100).map { VehicleIdentity(kind: .vehicle, id: "v\($0)") }
        for vehicle in vehicles { _ = try await cache.token(for: vehicle) }
        clock.now.add(3600 - 450, ordering: .relaxed)  // halfway through the refresh window
        try await withRefresher(cache) {
            for vehicle in vehicles { _ = try await cache.token(for: vehicle) }
            try await eventually { cache.refreshesUnderWay == 0 }  // refreshes count as mints once begun
        }
        let refreshed = signer.mints.load(ordering: .relaxed) - 100
        #expect(refreshed > 0 && refreshed < 100, "\(refreshed) of 100 refreshed halfway through the window")
    }

    @Test func leastRecentlyUsedTokensAreEvictedBeyondCapacity() async throws {
        let (_, signer, cache) = countingCache(capacity: 3)
        func use(_ id: String) async throws { _ = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: id)) }
        for id in ["a", "b", "c"] { try await use(id) }
        try await use("a")  // a is now the most recently used
        try await use("d")  // over capacity: b, the least recently used, goes
        #expect(cache.count == 3)
        #expect(signer.mints.load(ordering: .relaxed) == 4)
        try await use("a")
        try await use("c")
        #expect(signer.mints.load(ordering: .relaxed) == 4, "a and c stayed")
        try await use("b")
        #expect(signer.mints.load(ordering: .relaxed) == 5, "b was evicted and is minted again")
    }
}
