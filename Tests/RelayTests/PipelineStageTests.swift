import Egress
import FleetAuth
import FleetEngine
import InputFormats
import Kafka
import NIOPosix
import Relay
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
    /// Partitions paused against flow control's wish are normal for a moment (a reader
    /// briefly behind); for longer than the limit they mean a stuck process.
    @Test func partitionsPausedAgainstTheWishTooLongMakeTheProcessUnhealthy() throws {
        let health = RelayHealth()
        let pausedFor = Mutex(0.0)
        health.watchPollLoop(secondsSinceLastPoll: { 0 }, secondsPausedAgainstWish: { pausedFor.withLock { $0 } })
        func flowControl(pausedForSeconds seconds: Double) throws -> RelayHealth.Check {
            pausedFor.withLock { $0 = seconds }
            return try #require(health.liveness.first { $0.name == "flow_control" })
        }
        let limit = Double(RelayHealth.unwishedPauseLimit.components.seconds)
        #expect(try flowControl(pausedForSeconds: limit).ok)
        #expect(try !flowControl(pausedForSeconds: limit + 1).ok)
        #expect(try flowControl(pausedForSeconds: 0).ok)
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
