import FleetAuth
import FleetEngine
import FleetSimulator
import InputFormats
import Kafka
import Relay
import Testing

/// The pipeline's state machine driven alone: no threads, no clock, no sleeps. Each test
/// states one promise of the README's "What the relay promises" in terms of events and actions.
@Suite struct PipelineStateTests {
    // MARK: At-least-once

    @Test func commitsOnlyUpToTheLowestUnfinishedRecord() throws {
        let core = Core()
        core.consume([core.fix("a", at: 1, offset: 10), core.fix("b", at: 1, offset: 11), core.fix("c", at: 1, offset: 12)])
        let requests = try (0..<3).map { _ in try #require(core.request()) }
        core.complete(requests[1], .accepted)
        core.complete(requests[2], .accepted)
        #expect(core.state.offsetsToCommit().isEmpty, "a slow record must not be skipped")
        core.complete(requests[0], .accepted)
        #expect(core.state.offsetsToCommit() == [core.offset(0, 13)])
        core.state.committed(core.state.offsetsToCommit())
        #expect(core.state.offsetsToCommit().isEmpty)
    }

    @Test func aRejectedRequestHoldsTheCommitUntilItsDeadLetterIsWritten() throws {
        let core = Core()
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("a", at: 2, offset: 1)])
        let request = try #require(core.request())
        core.complete(request, .rejected(reason: "invalid_argument", detail: "400"))
        #expect(core.deadLetters.map(\.source.offset).sorted() == [0, 1])
        #expect(core.state.offsetsToCommit().isEmpty)
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 2, "a revoke waits for dead letters under way")
        for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source)) }
        #expect(core.state.offsetsToCommit() == [core.offset(0, 2)])
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 0)
    }

    @Test func aBadRecordIsOrderedDeadLetteredAndHoldsTheCommitUntilWritten() throws {
        let core = Core()
        let bad = core.record(offset: 0)
        core.consume([.bad(bad, reason: "not_json", detail: "x"), core.fix("a", at: 1, offset: 1)])
        #expect(core.deadLetters.map(\.reason) == ["not_json"])
        core.complete(try #require(core.request()), .accepted)
        #expect(core.state.offsetsToCommit().isEmpty)
        core.observe(core.state.deadLetterWritten(bad))
        #expect(core.state.offsetsToCommit() == [core.offset(0, 2)])
    }

    /// A request ended without an answer (cancelled) while its partition is still ours: its
    /// records stay uncommitted, and its fixes go out again rather than hold the commit forever.
    @Test func anAbandonedRequestLeavesItsRecordsUncommittedAndSendsThemAgain() throws {
        let core = Core()
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("b", at: 1, offset: 1)])
        let first = try #require(core.request())
        let second = try #require(core.request())
        core.complete(first, .abandoned)
        core.complete(second, .accepted)
        #expect(core.state.offsetsToCommit().isEmpty)
        #expect(core.state.unfinishedRecords == 1)
        let again = try #require(core.request(), "the abandoned fix goes out again")
        #expect(again.update.vehicle.id == "a")
        core.complete(again, .accepted)
        #expect(core.state.offsetsToCommit() == [core.offset(0, 2)])
    }

    // MARK: Never backwards

    @Test func oneRequestPerVehicleAndFixesArrivingMeanwhileCoalesceIntoTheNext() throws {
        let core = Core()
        core.consume([core.fix("v", at: 1, offset: 0)])
        let first = try #require(core.request())
        core.consume([core.fix("v", at: 3, offset: 1), core.fix("v", at: 2, offset: 2)])
        #expect(core.request() == nil, "the vehicle has a request in flight")
        #expect(core.state.waitingWorkers == 1)
        core.complete(first, .accepted)
        let second = try #require(core.resumed.values.compactMap { $0 }.first)
        #expect(second.update.lastLocation.recordedAtMilliseconds == 3)
        #expect(second.update.pastLocations.map(\.recordedAtMilliseconds) == [2])
    }

    @Test func fixesNotNewerThanWhatFleetEngineHoldsFinishStaleAndUnsent() throws {
        let core = Core()
        core.consume([core.fix("v", at: 1, offset: 0)])
        let first = try #require(core.request())
        core.consume([core.fix("v", at: 4, offset: 1), core.fix("v", at: 6, offset: 2)])
        core.complete(first, .stale, newestKnown: 5, liveChecked: true)
        let next = try #require(core.request())
        #expect(core.stale == 1, "the fix at 4 is older than Fleet Engine's 5")
        #expect(next.update.lastLocation.recordedAtMilliseconds == 6)
        #expect(next.update.pastLocations.isEmpty)
        core.complete(next, .accepted)
        #expect(core.state.offsetsToCommit() == [core.offset(0, 3)])
    }

    @Test func aVehiclesFirstRequestAfterEveryAssignmentReadsItsLiveLocation() throws {
        let core = Core()
        core.consume([core.fix("v", at: 1, offset: 0)])
        let first = try #require(core.request())
        #expect(first.liveCheckEpoch == 1)
        core.complete(first, .accepted, liveChecked: true)
        core.consume([core.fix("v", at: 2, offset: 1)])
        let second = try #require(core.request())
        #expect(second.liveCheckEpoch == nil, "checked already in this assignment")
        core.complete(second, .accepted)
        core.observe(core.state.assign([core.partition(1)], generation: 2))
        core.consume([core.fix("v", at: 3, offset: 2)])
        #expect(try #require(core.request()).liveCheckEpoch == 2)
    }

    @Test func aRevokeStopsNewWorkOnItsPartitionsAndCancelsAndWaitsForWorkUnderWay() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("w", at: 1, offset: 0, partition: 1)])
        let onRevoked = try #require(core.request())
        let onKept = try #require(core.request())
        core.consume([core.fix("v", at: 2, offset: 1)])
        let revoking = core.state.beginRevoke([core.partition(0)])
        #expect(revoking.cancel.map(\.vehicle.id) == ["v"], "only the revoked partition's request is cancelled")
        #expect(revoking.cancel.first === onRevoked.cancellation)
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 1, "cancelled, yet under way until it ended")
        core.consume([core.fix("v", at: 3, offset: 2)])
        let finished = core.complete(onRevoked, .accepted)
        #expect(finished.workFinished)
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 0)
        #expect(core.request() == nil, "the queued fix belongs to a partition being revoked: not sent")
        let (offsets, _) = core.state.finishRevoke([core.partition(0)])
        #expect(offsets == [core.offset(0, 1)], "the finished record is committed before the partition goes")
        core.complete(onKept, .accepted)
        #expect(core.state.assignedPartitions == [core.partition(1)])
    }

    /// Abandoning a request that also settles a kept partition's record would leave that record
    /// unfinished for good: such a request is waited for, not cancelled.
    @Test func aRevokeDoesNotCancelARequestThatAlsoSettlesAKeptPartition() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("v", at: 2, offset: 0, partition: 1)])
        let spanning = try #require(core.request())
        #expect(spanning.partitions.count == 2)
        #expect(core.state.beginRevoke([core.partition(0)]).cancel.isEmpty)
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 1, "the revoke waits for it instead")
    }

    @Test func recordsFetchedUnderAnEarlierAssignmentAreSkipped() throws {
        let core = Core()
        _ = core.state.finishRevoke([core.partition(0)])
        core.observe(core.state.assign([core.partition(0)], generation: 2))
        core.consume([core.fix("v", at: 1, offset: 0, generation: 1)])
        #expect(core.state.unfinishedRecords == 0)
        core.consume([core.fix("v", at: 1, offset: 0, generation: 2)])
        #expect(core.state.unfinishedRecords == 1)
    }

    // MARK: No silent drops

    @Test func aHistoryLongerThanTheCapGoesOutAsSeveralRequestsOldestFirst() throws {
        let core = Core(limits: .init(pastLocations: 3))
        core.consume((0..<10).reversed().map { core.fix("v", at: Int64($0), offset: Int64(9 - $0)) })
        var sent: [[Int64]] = []
        while let request = core.request() {
            sent.append(request.update.pastLocations.map(\.recordedAtMilliseconds) + [request.update.lastLocation.recordedAtMilliseconds])
            core.complete(request, .accepted)
        }
        #expect(sent == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
        #expect(core.state.offsetsToCommit() == [core.offset(0, 10)])
    }

    /// A seeded run of random records, outcomes and token failures over several vehicles and
    /// partitions: every record ends accepted, superseded, stale or dead-lettered exactly once,
    /// every partition commits to its end, and no vehicle's `lastLocation` ever goes back.
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
    func everyRecordEndsOnceAndNoVehicleMovesBackwards(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let core = Core(limits: .init(pastLocations: 4, maximumPendingRecords: 40), partitions: [0, 1, 2])
        var nextOffset: [Int32: Int64] = [0: 0, 1: 0, 2: 0]
        var sentTimes: [String: Int64] = [:]
        var settled: [String: Int] = [:]
        var inFlight: [CoalescedRequest] = []
        var backwards = 0
        for step in 0..<2_000 {
            if step < 1_500, random.next() % 3 == 0 {
                let index = random.next() % 12
                let (vehicle, partition) = ("v\(index)", Int32(index % 3))
                let offset = nextOffset[partition]!
                nextOffset[partition]! += 1
                let record = random.next() % 20 == 0
                    ? ConsumedRecord.bad(core.record(offset: offset, partition: partition), reason: "not_json", detail: "")
                    : core.fix(vehicle, at: Int64(random.next() % 10_000), offset: offset, partition: partition)
                core.consume([record])
            }
            if core.state.waitingWorkers == 0, let request = core.request() { inFlight.append(request) }
            inFlight += core.takeResumed()
            guard !inFlight.isEmpty, random.next() % 2 == 0 else { continue }
            let request = inFlight.remove(at: Int(random.next() % UInt64(inFlight.count)))
            let time = request.update.lastLocation.recordedAtMilliseconds
            if time <= sentTimes[request.update.vehicle.id] ?? .min { backwards += 1 }
            switch random.next() % 10 {
            case 0:
                core.observe(core.state.retryLater(request, after: .milliseconds(5), now: core.now))
                continue
            case 1:
                core.complete(request, .rejected(reason: "invalid_argument", detail: ""))
                settled["dead-lettered", default: 0] += request.sources.count
            default:
                sentTimes[request.update.vehicle.id] = time
                core.complete(request, .accepted)
                settled["accepted", default: 0] += request.sources.count
            }
            core.now += .milliseconds(1)
            core.observe(core.state.deadlineReached(now: core.now))
            for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source)) }
            core.deadLetters = []
        }
        var rounds = 0
        while !inFlight.isEmpty || core.state.queuedFixes > 0, rounds < 1_000 {
            rounds += 1
            core.now += .seconds(1)
            core.observe(core.state.deadlineReached(now: core.now))
            if core.state.waitingWorkers == 0, let request = core.request() { inFlight.append(request) }
            inFlight += core.takeResumed()
            for request in inFlight {
                sentTimes[request.update.vehicle.id] = request.update.lastLocation.recordedAtMilliseconds
                core.complete(request, .accepted)
                settled["accepted", default: 0] += request.sources.count
            }
            inFlight = []
            for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source)) }
            core.deadLetters = []
        }
        #expect(backwards == 0)
        #expect(core.state.unfinishedRecords == 0)
        let expected = nextOffset.filter { $0.value > 0 }.map { core.offset($0.key, $0.value) }.sorted { $0.topicPartition < $1.topicPartition }
        #expect(core.state.offsetsToCommit() == expected)
        let registered = nextOffset.values.reduce(0, +)
        #expect(Int64(settled.values.reduce(0, +) + core.stale + core.badWritten) == registered,
                "every record settled exactly once")
    }

    // MARK: Bounded memory, no head-of-line blocking, fetching resumes

    @Test func onlyAPartitionHoldingItsShareOfPendingRecordsPausesAndItResumesAtHalf() throws {
        let core = Core(limits: .init(maximumPendingRecords: 8), partitions: [0, 1])
        core.consume([core.fix("stuck", at: 0, offset: 0)])
        let stuck = try #require(core.request())
        core.consume((1...3).map { core.fix("stuck", at: Int64($0), offset: Int64($0)) })
        #expect(core.pauseWish == [core.partition(0)], "4 unfinished records: the share of 8 over 2 partitions")
        for offset in 0..<20 as Range<Int64> {
            core.consume([core.fix("other\(offset)", at: 1, offset: offset, partition: 1)])
            core.complete(try #require(core.request()), .accepted)
        }
        #expect(core.pauseWish == [core.partition(0)], "other vehicles flow: their partition never pauses")
        #expect(core.state.offsetsToCommit() == [core.offset(1, 20)], "the stuck partition holds its commit")
        core.complete(stuck, .accepted)
        let rest = try #require(core.request())
        #expect(core.pauseWish == [core.partition(0)], "3 unfinished: above half the share")
        core.complete(rest, .accepted)
        #expect(core.pauseWish.isEmpty)
        #expect(core.state.offsetsToCommit() == [core.offset(0, 4), core.offset(1, 20)])
    }

    @Test func aRebalanceDuringAnOutageLeavesNoPartitionPaused() throws {
        let core = Core(limits: .init(maximumPendingRecords: 4), partitions: [0, 1])
        core.consume((0..<4).map { core.fix("v\($0)", at: 1, offset: Int64($0 / 2), partition: Int32($0 % 2)) })
        #expect(core.pauseWish == [core.partition(0), core.partition(1)])
        _ = core.state.beginRevoke([core.partition(0), core.partition(1)])
        let revoked = core.state.finishRevoke([core.partition(0), core.partition(1)])
        core.observe(revoked.actions)
        #expect(core.pauseWish.isEmpty, "a revoked partition's pause must not stay in the wish")
        core.observe(core.state.assign([core.partition(0), core.partition(1)], generation: 2))
        #expect(core.pauseWish.isEmpty, "a new assignment starts fetching")
        #expect(core.state.pauseWish.isEmpty)
    }

    @Test func aSmallerShareAfterAnAssignmentPausesAPartitionAlreadyOverIt() throws {
        let core = Core(limits: .init(maximumPendingRecords: 8), partitions: [0])
        core.consume((0..<5).map { core.fix("v\($0)", at: 1, offset: Int64($0)) })
        #expect(core.pauseWish.isEmpty, "5 of a share of 8")
        core.observe(core.state.assign([core.partition(1)], generation: 2))
        #expect(core.pauseWish == [core.partition(0)], "5 of a share of 4")
    }

    @Test func vehiclesIdleForTheIdleLimitAreForgotten() throws {
        let core = Core(limits: .init(vehicleIdleLimit: .seconds(10)))
        #expect(core.state.timerWillSleep() == core.start + .seconds(5),
                "the timer sleeps until the first sweep even before any vehicle exists")
        core.consume((0..<100).map { core.fix("v\($0)", at: 1, offset: Int64($0)) })
        while let request = core.request() { core.complete(request, .accepted) }
        core.consume([core.fix("busy", at: 1, offset: 100)])
        let busy = try #require(core.request())
        #expect(core.state.vehicleCount == 101)
        core.observe(core.state.deadlineReached(now: core.start + .seconds(5)))
        #expect(core.state.vehicleCount == 101, "idle for 5 s only")
        core.observe(core.state.deadlineReached(now: core.start + .seconds(10)))
        #expect(core.state.vehicleCount == 1, "only the vehicle with a request under way is left")
        core.complete(busy, .accepted)
    }

    // MARK: Deadlines, not ticks

    @Test func aFixForAVehicleWithNothingUnderWayGoesToAWaitingWorkerAtOnce() throws {
        let core = Core()
        #expect(core.request() == nil)
        let actions = core.consume([core.fix("v", at: 1, offset: 0)])
        #expect(actions.resume.count == 1, "no batch to fill, no tick to wait for")
        #expect(core.state.nextDeadline == core.start + .seconds(150), "only the idle sweep is due")
    }

    @Test func aVehicleUnderAMinimumIntervalLeavesAtItsDueTimeAndWakesASleepingTimer() throws {
        let core = Core(limits: .init(minimumInterval: .seconds(5)))
        core.consume([core.fix("v", at: 1, offset: 0)])
        core.complete(try #require(core.request()), .accepted)
        #expect(core.state.timerWillSleep() == core.start + .seconds(150))
        core.now = core.start + .seconds(1)
        let deferred = core.consume([core.fix("v", at: 2, offset: 1), core.fix("v", at: 3, offset: 2)])
        #expect(deferred.wakeTimer, "the timer sleeps past the vehicle's due time")
        #expect(core.request() == nil)
        #expect(core.state.timerWillSleep() == core.start + .seconds(5))
        core.observe(core.state.deadlineReached(now: core.start + .seconds(4)))
        #expect(core.state.readyVehicles == 0 && core.resumed.isEmpty)
        core.observe(core.state.deadlineReached(now: core.start + .seconds(5)))
        let request = try #require(core.resumed.values.compactMap { $0 }.first)
        #expect(request.update.lastLocation.recordedAtMilliseconds == 3)
    }

    /// A slow request (a token minted, the live location read, the update retried) does not
    /// eat into the interval: the next request waits the whole interval after it ended, so
    /// Fleet Engine never sees two of a vehicle's updates closer than the interval.
    @Test func aMinimumIntervalCountsFromTheEndOfTheVehiclesLastRequest() throws {
        let core = Core(limits: .init(minimumInterval: .seconds(5)))
        core.consume([core.fix("v", at: 1, offset: 0)])
        let slow = try #require(core.request())
        core.now = core.start + .seconds(3)
        core.complete(slow, .accepted)
        core.now = core.start + .seconds(4)
        core.consume([core.fix("v", at: 2, offset: 1)])
        #expect(core.request() == nil)
        #expect(core.state.timerWillSleep() == core.start + .seconds(8))
        core.observe(core.state.deadlineReached(now: core.start + .seconds(5)))
        #expect(core.state.readyVehicles == 0 && core.resumed.isEmpty, "5 s after the request began, 2 s after it ended")
        core.observe(core.state.deadlineReached(now: core.start + .seconds(8)))
        #expect(core.takeResumed().map(\.update.lastLocation.recordedAtMilliseconds) == [2])
    }

    /// A try that found no token sent nothing to Fleet Engine: it does not start the interval.
    @Test func aTryWithoutATokenDoesNotStartTheMinimumInterval() throws {
        let core = Core(limits: .init(minimumInterval: .seconds(5)))
        core.consume([core.fix("v", at: 1, offset: 0)])
        core.observe(core.state.retryLater(try #require(core.request()), after: .seconds(1), now: core.start))
        core.observe(core.state.deadlineReached(now: core.start + .seconds(1)))
        #expect(core.request() != nil, "sent after the backoff, not after an interval")
    }

    @Test func aVehicleWithoutATokenWaitsOutItsBackoffWithoutHoldingAWorker() throws {
        let core = Core()
        core.consume([core.fix("cold", at: 1, offset: 0), core.fix("cold", at: 2, offset: 1)])
        let cold = try #require(core.request())
        core.observe(core.state.retryLater(cold, after: .seconds(2), now: core.start))
        #expect(core.state.requestsInFlight == 0)
        core.consume([core.fix("warm", at: 1, offset: 2), core.fix("cold", at: 3, offset: 3)])
        #expect(try #require(core.request()).update.vehicle.id == "warm")
        core.observe(core.state.deadlineReached(now: core.start + .seconds(1)))
        #expect(core.state.readyVehicles == 0)
        core.observe(core.state.deadlineReached(now: core.start + .seconds(2)))
        let retry = try #require(core.request())
        #expect(retry.update.pastLocations.map(\.recordedAtMilliseconds) == [1, 2])
        #expect(retry.update.lastLocation.recordedAtMilliseconds == 3)
        #expect(retry.tokenAttempts == 1)
        #expect(retry.awaitingTokenSince == core.start)
    }

    // MARK: Shutdown

    @Test func closingIntakeReleasesWorkersOnceTheRequestsUnderWayEnded() throws {
        let core = Core()
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("w", at: 1, offset: 1)])
        let first = try #require(core.request())
        core.consume([core.fix(first.update.vehicle.id, at: 2, offset: 2)])
        let second = try #require(core.request())
        #expect(core.request() == nil)
        core.observe(core.state.closeIntake())
        #expect(core.resumed.isEmpty, "requests are still under way")
        core.complete(first, .accepted)
        #expect(core.resumed.isEmpty)
        core.complete(second, .accepted)
        #expect(core.resumed.count == 1 && core.resumed.values.allSatisfy { $0 == nil })
        #expect(core.state.queuedFixes == 0)
        #expect(core.state.offsetsToCommit() == [core.offset(0, 2)], "the dropped fix stays uncommitted")
    }
}

/// The state machine with everything it asked for collected.
private final class Core {
    let start = ContinuousClock.now
    var now: ContinuousClock.Instant
    var state: PipelineState<Int>
    private var workers = 0
    var resumed: [Int: CoalescedRequest?] = [:]
    var deadLetters: [DeadLetterOrder] = []
    var badWritten = 0
    var pauseWish: Set<TopicPartition> = []
    var stale = 0

    init(limits: PipelineState<Int>.Limits = .init(), partitions: [Int32] = [0]) {
        now = start
        state = PipelineState(limits: limits, now: start)
        observe(state.assign(partitions.map(partition), generation: 1))
    }

    func partition(_ number: Int32) -> TopicPartition { TopicPartition(topic: "t", partition: number) }

    func offset(_ partition: Int32, _ offset: Int64) -> TopicPartitionOffset {
        TopicPartitionOffset(self.partition(partition), offset: offset)
    }

    func record(offset: Int64, partition: Int32 = 0, generation: UInt64 = 1) -> RecordSource {
        RecordSource(KafkaRecord(topic: "t", partition: partition, offset: offset, key: nil, value: [],
                                 assignmentGeneration: generation))
    }

    func fix(_ vehicle: String, at milliseconds: Int64, offset: Int64, partition: Int32 = 0,
             generation: UInt64 = 1) -> ConsumedRecord {
        .fix(PendingFix(update: LocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: vehicle),
                                               fix: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: milliseconds)),
                        source: record(offset: offset, partition: partition, generation: generation)))
    }

    func observe(_ actions: PipelineActions<Int>) {
        for (worker, request) in actions.resume { resumed[worker] = request }
        deadLetters += actions.deadLetters
        badWritten += actions.deadLetters.filter { $0.reason == "not_json" }.count
        if let change = actions.pause { pauseWish = change.wish }
        stale += actions.staleFixes
    }

    @discardableResult
    func consume(_ records: [ConsumedRecord]) -> PipelineActions<Int> {
        let actions = state.consume(records, now: now)
        observe(actions)
        return actions
    }

    /// A request handed to a worker that was waiting, or else a new worker's request when one
    /// is ready now; nil when none is (the new worker waits).
    func request() -> CoalescedRequest? {
        if let waiting = resumed.first(where: { $0.value != nil }) {
            resumed[waiting.key] = nil
            return waiting.value
        }
        workers += 1
        observe(state.requestWork(workers, now: now))
        return resumed.removeValue(forKey: workers) ?? nil
    }

    /// Requests handed to waiting workers since the last call.
    func takeResumed() -> [CoalescedRequest] {
        defer { resumed = resumed.filter { $0.value == nil } }
        return resumed.values.compactMap { $0 }
    }

    @discardableResult
    func complete(_ request: CoalescedRequest, _ outcome: DeliveryOutcome, newestKnown: Int64? = nil,
                           liveChecked: Bool = false) -> PipelineActions<Int> {
        let newest = newestKnown ?? (outcome == .accepted ? request.update.lastLocation.recordedAtMilliseconds : nil)
        let actions = state.complete(request, Delivery(outcome: outcome, newestKnownMilliseconds: newest,
                                                       liveChecked: liveChecked), now: now)
        observe(actions)
        return actions
    }
}
