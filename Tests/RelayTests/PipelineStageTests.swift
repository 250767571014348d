import Egress
import FleetAuth
import FleetEngine
import FleetModel
import InputFormats
import Kafka
import NIOPosix
@testable import Relay
import Synchronization
import Testing

func pendingFix(_ vehicle: String, at milliseconds: Int64, partition: Int32 = 0, offset: Int64 = 0) -> PendingFix {
    let record = KafkaRecord(topic: "t", partition: partition, offset: offset, key: nil, value: [])
    return PendingFix(update: LocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: vehicle),
                                             fix: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: milliseconds)),
                      source: RecordSource(record))
}

@Suite struct CoalescerTests {
    let vehicle = VehicleIdentity(kind: .vehicle, id: "v")

    @Test func newestBecomesLastLocationAndOlderOnesPastLocationsOldestFirst() throws {
        let fixes = [pendingFix("v", at: 300, offset: 1), pendingFix("v", at: 100, offset: 2), pendingFix("v", at: 200, offset: 3)]
        let result = Coalescer.coalesce(vehicle: vehicle, fixes: fixes, newestAcceptedMilliseconds: nil, pastLimit: 100)
        let coalesced = try #require(result.request)
        #expect(result.stale.isEmpty)
        #expect(result.later.isEmpty)
        #expect(coalesced.update.lastLocation.recordedAtMilliseconds == 300)
        #expect(coalesced.update.pastLocations.map(\.recordedAtMilliseconds) == [100, 200])
        #expect(Set(coalesced.sources.map(\.offset)) == [1, 2, 3])
    }

    @Test func fixesNotNewerThanTheAcceptedOneAreStaleAndNeverSent() throws {
        let fixes = [pendingFix("v", at: 100), pendingFix("v", at: 250), pendingFix("v", at: 200)]
        let result = Coalescer.coalesce(vehicle: vehicle, fixes: fixes, newestAcceptedMilliseconds: 200, pastLimit: 100)
        #expect(result.stale.map(\.update.fix.recordedAtMilliseconds).sorted() == [100, 200])
        #expect(result.request?.update.lastLocation.recordedAtMilliseconds == 250)
        #expect(result.request?.update.pastLocations.isEmpty == true)
        let none = Coalescer.coalesce(vehicle: vehicle, fixes: [pendingFix("v", at: 50)],
                                      newestAcceptedMilliseconds: 200, pastLimit: 100)
        #expect(none.request == nil)
        #expect(none.stale.count == 1)
    }

    @Test func fixesAlreadyInTimeOrderKeepItWithTheStaleOnesFirst() throws {
        let fixes = [pendingFix("v", at: 100, offset: 1), pendingFix("v", at: 200, offset: 2),
                     pendingFix("v", at: 200, offset: 3), pendingFix("v", at: 300, offset: 4)]
        let result = Coalescer.coalesce(vehicle: vehicle, fixes: fixes, newestAcceptedMilliseconds: 100, pastLimit: 100)
        let request = try #require(result.request)
        #expect(result.stale.map(\.source.offset) == [1])
        #expect(request.newest.source.offset == 4)
        #expect(request.carried.map(\.source.offset) == [2, 3])
    }

    @Test func aLoneFixIsSentAloneUnlessFleetEngineHoldsOneAsNew() throws {
        let fix = pendingFix("v", at: 200, offset: 7)
        let fresh = Coalescer.coalesce(vehicle: vehicle, fixes: [fix], newestAcceptedMilliseconds: 199, pastLimit: 100)
        let request = try #require(fresh.request)
        #expect(request.update.lastLocation.recordedAtMilliseconds == 200)
        #expect(request.update.pastLocations.isEmpty)
        #expect(request.sources.map(\.offset) == [7])
        #expect(request.partitions.count == 1)
        #expect(fresh.stale.isEmpty && fresh.later.isEmpty)
        let asNew = Coalescer.coalesce(vehicle: vehicle, fixes: [fix], newestAcceptedMilliseconds: 200, pastLimit: 100)
        #expect(asNew.request == nil)
        #expect(asNew.stale.map(\.source.offset) == [7])
    }

    @Test func aHistoryLongerThanTheCapGoesOutOldestChunkFirstAndTheRestWaits() throws {
        let fixes = (1...10).reversed().map { pendingFix("v", at: Int64($0), offset: Int64($0)) }
        var waiting = fixes
        var sent: [[Int64]] = []
        while true {
            let result = Coalescer.coalesce(vehicle: vehicle, fixes: waiting, newestAcceptedMilliseconds: sent.last?.last,
                                            pastLimit: 3)
            guard let request = result.request else { break }
            #expect(result.stale.isEmpty)
            #expect(request.sources.count == request.update.pastLocations.count + 1)
            sent.append(request.update.pastLocations.map(\.recordedAtMilliseconds) + [request.update.lastLocation.recordedAtMilliseconds])
            waiting = result.later
        }
        #expect(sent == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]])
    }
}

@Suite struct RetryPolicyTests {
    @Test func backoffIsFullJitterCappedAndHonoursRetryAfter() {
        let policy = RetryPolicy(initialDelay: .milliseconds(200), maximumDelay: .seconds(10))
        #expect(policy.delay(attempt: 0, random: { $0.upperBound }) == .milliseconds(200))
        #expect(policy.delay(attempt: 3, random: { $0.upperBound }) == .milliseconds(1600))
        #expect(policy.delay(attempt: 20, random: { $0.upperBound }) == .seconds(10))
        #expect(policy.delay(attempt: 5, random: { $0.lowerBound }) == .zero)
        #expect(policy.delay(attempt: 0, retryAfterSeconds: 3, random: { $0.upperBound }) == .seconds(3))
    }
}

@Suite struct RelayHealthTests {
    /// Records waiting for the Schema Registry are a readiness matter, named with their reason
    /// once they waited past the outage limit; liveness stays ok, since a restart mends no
    /// registry outage; and readiness recovers once they no longer wait.
    @Test func recordsWaitingForTheRegistryTurnReadinessOffAndNeverLiveness() throws {
        let health = RelayHealth(maximumOutage: .seconds(60))
        let began = ContinuousClock.now - .seconds(61)
        health.recordSchemaRegistryUnavailable("the registry answered 503", now: began)
        health.recordSchemaRegistryUnavailable("the registry answered 503", now: .now)
        let waiting = try #require(health.readiness.first { $0.name == "schema_registry" })
        #expect(!waiting.ok, "61 s of waiting: past the outage limit")
        #expect(waiting.detail.contains("the registry answered 503") && waiting.detail.contains("61 s"), "\(waiting.detail)")
        #expect(health.liveness.allSatisfy { $0.ok })
        health.recordSchemaRegistryUnavailable(nil)
        #expect(health.readiness.first { $0.name == "schema_registry" }?.ok == true)
    }

    /// A poll loop that stopped coming round is what only a restart mends.
    @Test func aPollLoopSilentPastItsLimitFailsLiveness() throws {
        let health = RelayHealth()
        let silentFor = Mutex(0.0)
        health.watchPollLoop(secondsSinceLastPoll: { silentFor.withLock { $0 } })
        func pollLoop(silentForSeconds seconds: Double) throws -> RelayHealth.Check {
            silentFor.withLock { $0 = seconds }
            return try #require(health.liveness.first { $0.name == "kafka_poll_loop" })
        }
        #expect(try pollLoop(silentForSeconds: RelayHealth.stuckPollSeconds).ok)
        #expect(try !pollLoop(silentForSeconds: RelayHealth.stuckPollSeconds + 1).ok)
    }
}

/// Vehicle tokens are signed off the event loops that carry Fleet Engine's connections, though
/// the workers asking for them run on those loops.
@Suite struct TokenMintingTests {
    /// Notes whether each signature ran on an event loop.
    final class LoopWatchingSigner: VehicleTokenSigner, Sendable {
        let name = "loop-watching"
        private let signer: LocalKeySigner
        let signedOnAnEventLoop = Mutex<[Bool]>([])

        init(key: ServiceAccountKey) {
            signer = LocalKeySigner(key: key)
        }

        func mint(for vehicle: VehicleIdentity) async throws -> VehicleToken {
            signedOnAnEventLoop.withLock { $0.append(MultiThreadedEventLoopGroup.currentEventLoop != nil) }
            return try await signer.mint(for: vehicle)
        }
    }

    @Test func aWorkerOnAnEventLoopHasItsTokenSignedOffTheLoop() async throws {
        let signer = LoopWatchingSigner(key: RelayHarness.sharedKey)
        let cache = TokenCache(signer: signer)
        let loop = try #require(EventLoopTaskExecutor.singletonLoops.first)
        let onLoop = try await withTaskExecutorPreference(loop) {
            let onLoop = MultiThreadedEventLoopGroup.currentEventLoop != nil
            for index in 0..<3 { _ = try await cache.token(for: VehicleIdentity(kind: .vehicle, id: "v\(index)")) }
            return onLoop
        }
        #expect(onLoop, "the worker itself runs on the event loop")
        #expect(signer.signedOnAnEventLoop.withLock { $0 } == [false, false, false])
    }
}
