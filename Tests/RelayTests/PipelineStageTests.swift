import FleetAuth
import FleetEngine
import Kafka
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

@Suite struct OffsetTrackerTests {
    let partition = TopicPartition(topic: "t", partition: 0)

    func record(_ offset: Int64, generation: UInt64 = 1) -> KafkaRecord {
        KafkaRecord(topic: "t", partition: 0, offset: offset, key: nil, value: [], assignmentGeneration: generation)
    }

    @Test func commitsOnlyUpToTheFirstUnfinishedRecord() {
        let tracker = OffsetTracker()
        tracker.assign([partition], generation: 1)
        for offset: Int64 in 10..<15 { #expect(tracker.register(record(offset))) }
        #expect(tracker.committableOffsets().isEmpty)
        tracker.finish(RecordSource(record(11)))
        tracker.finish(RecordSource(record(12)))
        #expect(tracker.committableOffsets().isEmpty, "a failed or slow record must not be skipped")
        tracker.finish(RecordSource(record(10)))
        #expect(tracker.committableOffsets() == [TopicPartitionOffset(partition, offset: 13)])
        tracker.markCommitted(tracker.committableOffsets())
        #expect(tracker.committableOffsets().isEmpty)
        tracker.finish(RecordSource(record(14)))
        tracker.finish(RecordSource(record(13)))
        #expect(tracker.committableOffsets() == [TopicPartitionOffset(partition, offset: 15)])
        #expect(tracker.outstanding == 0)
    }

    @Test func recordsFromAnEarlierAssignmentAreIgnored() {
        let tracker = OffsetTracker()
        tracker.assign([partition], generation: 1)
        #expect(tracker.register(record(0)))
        #expect(tracker.revoke([partition]).isEmpty)
        tracker.assign([partition], generation: 2)
        #expect(!tracker.register(record(1, generation: 1)))
        #expect(tracker.register(record(1, generation: 2)))
        tracker.finish(RecordSource(record(0, generation: 1)))
        #expect(tracker.committableOffsets().isEmpty)
        tracker.finish(RecordSource(record(1, generation: 2)))
        #expect(tracker.committableOffsets() == [TopicPartitionOffset(partition, offset: 2)])
    }

    @Test func revokeReturnsTheFinalOffsetsToCommit() {
        let tracker = OffsetTracker()
        tracker.assign([partition], generation: 1)
        for offset: Int64 in 0..<3 { _ = tracker.register(record(offset)) }
        tracker.finish(RecordSource(record(0)))
        #expect(tracker.revoke([partition]) == [TopicPartitionOffset(partition, offset: 1)])
        #expect(tracker.assignedPartitions.isEmpty)
    }

    @Test func staysCorrectOverManyRecords() {
        let tracker = OffsetTracker()
        tracker.assign([partition], generation: 1)
        for offset in 0..<20_000 { _ = tracker.register(record(Int64(offset))) }
        for offset in stride(from: 19_999, through: 1, by: -1) { tracker.finish(RecordSource(record(Int64(offset)))) }
        #expect(tracker.committableOffsets().isEmpty)
        tracker.finish(RecordSource(record(0)))
        #expect(tracker.committableOffsets() == [TopicPartitionOffset(partition, offset: 20_000)])
    }

    @Test func aStuckRecordHoldsItsPartitionsCommitButCountsAsOneUnfinishedRecord() {
        let tracker = OffsetTracker()
        let other = TopicPartition(topic: "t", partition: 1)
        tracker.assign([partition, other], generation: 1)
        let start = ContinuousClock.now
        for offset: Int64 in 0..<1000 { _ = tracker.register(record(offset), now: start + .milliseconds(offset)) }
        for offset: Int64 in 0..<1000 where offset != 3 { tracker.finish(RecordSource(record(offset))) }
        #expect(tracker.unfinishedPerPartition == [partition: 1, other: 0])
        #expect(tracker.committableOffsets() == [TopicPartitionOffset(partition, offset: 3)])
        let ages = tracker.oldestUnfinishedAge(now: start + .seconds(10))
        #expect(ages[partition] == .seconds(10) - .milliseconds(3))
        #expect(ages[other] == .zero)
        #expect(tracker.uncommitted == 1000)
    }
}

@Suite struct BatcherAndRetryTests {
    @Test func batchesBySizeAndByLinger() {
        let batcher = Batcher(maximumSize: 3, linger: .milliseconds(100))
        let start = ContinuousClock.now
        #expect(batcher.add(pendingFix("a", at: 1), now: start) == nil)
        #expect(batcher.add(pendingFix("b", at: 1), now: start) == nil)
        #expect(batcher.add(pendingFix("c", at: 1), now: start)?.count == 3)
        #expect(batcher.add(pendingFix("d", at: 1), now: start) == nil)
        #expect(batcher.takeIfLingered(now: start + .milliseconds(99)) == nil)
        #expect(batcher.takeIfLingered(now: start + .milliseconds(100))?.count == 1)
        #expect(batcher.takeAll().isEmpty)
    }

    @Test func backoffIsFullJitterCappedAndHonoursRetryAfter() {
        let policy = RetryPolicy(initialDelay: .milliseconds(200), maximumDelay: .seconds(10))
        #expect(policy.delay(attempt: 0, random: { $0.upperBound }) == .milliseconds(200))
        #expect(policy.delay(attempt: 3, random: { $0.upperBound }) == .milliseconds(1600))
        #expect(policy.delay(attempt: 20, random: { $0.upperBound }) == .seconds(10))
        #expect(policy.delay(attempt: 5, random: { $0.lowerBound }) == .zero)
        #expect(policy.delay(attempt: 0, retryAfterSeconds: 3, random: { $0.upperBound }) == .seconds(3))
    }
}

@Suite struct VehicleDispatcherTests {
    @Test func oneRequestPerVehicleInFlightAndLaterFixesCoalesceIntoTheNext() async throws {
        let dispatcher = VehicleDispatcher(settleStale: { _ in })
        await dispatcher.submit([pendingFix("v", at: 1, offset: 0)])
        let first = try #require(await dispatcher.nextRequest())
        await dispatcher.submit([pendingFix("v", at: 2, offset: 1), pendingFix("v", at: 3, offset: 2)])
        #expect(await dispatcher.readyVehicles == 0, "the vehicle has a request in flight")
        await dispatcher.complete(first, newestKnownMilliseconds: 1, liveChecked: false)
        let second = try #require(await dispatcher.nextRequest())
        #expect(second.update.lastLocation.recordedAtMilliseconds == 3)
        #expect(second.update.pastLocations.map(\.recordedAtMilliseconds) == [2])
    }

    @Test func pacingHoldsAVehicleForItsMinimumInterval() async throws {
        let dispatcher = VehicleDispatcher(minimumInterval: .seconds(5), settleStale: { _ in })
        await dispatcher.submit([pendingFix("v", at: 1)])
        let first = try #require(await dispatcher.nextRequest())
        let sentAt = ContinuousClock.now
        await dispatcher.complete(first, newestKnownMilliseconds: 1, liveChecked: false)
        await dispatcher.submit([pendingFix("v", at: 2), pendingFix("v", at: 3)])
        await dispatcher.releaseDeferred(now: sentAt + .seconds(1))
        #expect(await dispatcher.readyVehicles == 0)
        await dispatcher.releaseDeferred(now: sentAt + .seconds(6))
        #expect(await dispatcher.readyVehicles == 1)
        let second = try #require(await dispatcher.nextRequest())
        #expect(second.update.lastLocation.recordedAtMilliseconds == 3)
        #expect(second.update.pastLocations.count == 1)
    }

    @Test func fixesOfRevokedPartitionsAreNotSent() async throws {
        let dispatcher = VehicleDispatcher(isCurrent: { $0.offset != 7 }, settleStale: { _ in })
        await dispatcher.submit([pendingFix("v", at: 1, offset: 7), pendingFix("w", at: 1, offset: 8)])
        let request = try #require(await dispatcher.nextRequest())
        #expect(request.update.vehicle.id == "w")
        #expect(await dispatcher.readyVehicles == 0)
    }

    @Test func abandoningDropsQueuedWorkAndReleasesWorkersAfterInFlightRequests() async throws {
        let dispatcher = VehicleDispatcher(minimumInterval: .seconds(60), settleStale: { _ in })
        await dispatcher.submit([pendingFix("v", at: 1), pendingFix("w", at: 1)])
        let first = try #require(await dispatcher.nextRequest())
        await dispatcher.submit([pendingFix(first.update.vehicle.id, at: 2)])  // waits: request in flight
        await dispatcher.abandonQueued()
        let waiting = Task { await dispatcher.nextRequest() }
        await dispatcher.complete(first, newestKnownMilliseconds: 1, liveChecked: false)
        #expect(await waiting.value == nil)
        #expect(await dispatcher.queuedFixes == 0)
    }

    @Test func aRequestWithoutATokenWaitsInItsLaneWithoutHoldingOthersUp() async throws {
        let dispatcher = VehicleDispatcher(settleStale: { _ in })
        await dispatcher.submit([pendingFix("cold", at: 1, offset: 1), pendingFix("cold", at: 2, offset: 2)])
        let cold = try #require(await dispatcher.nextRequest())
        let failedAt = ContinuousClock.now
        await dispatcher.retryLater(cold, after: .seconds(2), now: failedAt)
        #expect(await dispatcher.inFlight == 0)
        await dispatcher.submit([pendingFix("warm", at: 1), pendingFix("cold", at: 3, offset: 3)])
        // The warm vehicle goes first; the cold one waits out its backoff.
        #expect(try #require(await dispatcher.nextRequest()).update.vehicle.id == "warm")
        await dispatcher.releaseDeferred(now: failedAt + .seconds(1))
        #expect(await dispatcher.readyVehicles == 0)
        await dispatcher.releaseDeferred(now: failedAt + .seconds(2))
        let retry = try #require(await dispatcher.nextRequest())
        // Nothing from the first attempt is lost, and the newer fix joined it.
        #expect(retry.update.lastLocation.recordedAtMilliseconds == 3)
        #expect(retry.update.pastLocations.map(\.recordedAtMilliseconds) == [1, 2])
        #expect(retry.tokenAttempts == 1)
        #expect(retry.awaitingTokenSince == failedAt)
        await dispatcher.complete(retry, newestKnownMilliseconds: 3, liveChecked: false)
        await dispatcher.submit([pendingFix("cold", at: 4)])
        let next = try #require(await dispatcher.nextRequest())
        #expect(next.tokenAttempts == 0 && next.awaitingTokenSince == nil)
    }

    @Test func deferredVehiclesAreReleasedInDueOrderWhateverTheirDelays() async throws {
        let dispatcher = VehicleDispatcher(settleStale: { _ in })
        let now = ContinuousClock.now
        for (vehicle, delay) in [("a", 9), ("b", 3), ("c", 6)] {
            await dispatcher.submit([pendingFix(vehicle, at: 1)])
            let request = try #require(await dispatcher.nextRequest())
            await dispatcher.retryLater(request, after: .seconds(delay), now: now)
        }
        var order: [String] = []
        for second in 1...9 {
            await dispatcher.releaseDeferred(now: now + .seconds(second))
            while await dispatcher.readyVehicles > 0, let request = await dispatcher.nextRequest() {
                order.append(request.update.vehicle.id)
            }
        }
        #expect(order == ["b", "c", "a"])
    }

    @Test func firstRequestOfAVehicleInAnAssignmentEpochAsksForALiveCheck() async throws {
        let epoch = Mutex<UInt64>(1)
        let dispatcher = VehicleDispatcher(assignmentEpoch: { epoch.withLock { $0 } }, settleStale: { _ in })
        await dispatcher.submit([pendingFix("v", at: 1)])
        let first = try #require(await dispatcher.nextRequest())
        #expect(first.liveCheckEpoch == 1)
        await dispatcher.complete(first, newestKnownMilliseconds: 5, liveChecked: true)
        await dispatcher.submit([pendingFix("v", at: 4), pendingFix("v", at: 6)])
        let second = try #require(await dispatcher.nextRequest())
        #expect(second.liveCheckEpoch == nil)
        #expect(second.update.lastLocation.recordedAtMilliseconds == 6)
        #expect(second.update.pastLocations.isEmpty, "the fix older than Fleet Engine's live one is stale")
        await dispatcher.complete(second, newestKnownMilliseconds: 6, liveChecked: false)
        epoch.withLock { $0 = 2 }  // a rebalance
        await dispatcher.submit([pendingFix("v", at: 7)])
        #expect(try #require(await dispatcher.nextRequest()).liveCheckEpoch == 2)
    }
}

@Suite struct RelayHealthTests {
    /// Partitions paused against flow control's wish are normal for a moment (a reader
    /// briefly behind); for longer than the limit they mean a stuck process.
    @Test func partitionsPausedAgainstTheWishTooLongMakeTheProcessUnhealthy() throws {
        let health = RelayHealth()
        let start = ContinuousClock.now
        func flowControl(at now: ContinuousClock.Instant) throws -> RelayHealth.Check {
            try #require(health.liveness(at: now).first { $0.name == "flow_control" })
        }
        health.recordPauseState(unwished: true, now: start)
        #expect(try flowControl(at: start + RelayHealth.unwishedPauseLimit).ok)
        #expect(try !flowControl(at: start + RelayHealth.unwishedPauseLimit + .seconds(1)).ok)
        health.recordPauseState(unwished: false, now: start + .seconds(40))
        #expect(try flowControl(at: start + .seconds(41)).ok)
    }
}
