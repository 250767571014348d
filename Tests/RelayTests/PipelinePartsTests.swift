import FleetEngine
import FleetModel
import InputFormats
import Kafka
import NIOCore
import NIOPosix
@testable import Relay
import Testing

/// The parts of the pipeline's state machine on their own, each to its promises; the property
/// test holds them together.
@Suite struct PartitionLedgerTests {
    let start = ContinuousClock.now
    let p0 = TopicPartition(topic: "t", partition: 0)
    let p1 = TopicPartition(topic: "t", partition: 1)

    func source(_ partition: Int32, _ offset: Int64, generation: UInt64 = 1) -> RecordSource {
        RecordSource(KafkaRecord(topic: "t", partition: partition, offset: offset, key: nil, value: [],
                                 assignmentGeneration: generation))
    }

    /// The commit offset is the lowest unfinished record, whatever finished after it.
    @Test func anOffsetIsCommittableOnlyBelowTheLowestUnfinishedRecord() {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 100, burstRecords: 1_000)
        ledger.assign([p0], generation: 1)
        let taken = (0..<5).map { ledger.register(source(0, Int64($0)), at: Moment(start)) }
        #expect(taken.allSatisfy { $0 })
        let again = ledger.register(source(0, 3), at: Moment(start))
        #expect(!again, "a record fetched twice is taken in once")
        ledger.finish(source(0, 0))
        ledger.finish(source(0, 2))
        ledger.finish(source(0, 3))
        #expect(ledger.offsetsToCommit() == [TopicPartitionOffset(p0, offset: 1)])
        ledger.finish(source(0, 1))
        #expect(ledger.offsetsToCommit() == [TopicPartitionOffset(p0, offset: 4)])
        #expect(ledger.unfinishedRecords == 1)
    }

    /// A request's records finish in their own partitions' books, whichever partition its newest
    /// fix came from, and records of an assignment no longer held finish nothing.
    @Test func aRequestsRecordsFinishInThePartitionsTheyCameFrom() throws {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 100, burstRecords: 1_000)
        ledger.assign([p0, p1], generation: 2)
        for offset in 0..<4 { _ = ledger.register(source(0, Int64(offset), generation: 2), at: Moment(start)) }
        for offset in 0..<3 { _ = ledger.register(source(1, Int64(offset), generation: 2), at: Moment(start)) }
        #expect(ledger.unfinishedRecords == 7)
        let vehicle = VehicleIdentity(kind: .vehicle, id: "v1")
        func fix(_ source: RecordSource, at time: Int64) -> PendingFix {
            PendingFix(update: LocationUpdate(vehicle: vehicle, fix: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: time)),
                       source: source)
        }
        // Oldest first: p0's 0 and 1, p1's 0, an old assignment's p0 record, then p1's 1 as the newest.
        let fixes = [fix(source(0, 0, generation: 2), at: 1), fix(source(0, 1, generation: 2), at: 2),
                     fix(source(1, 0, generation: 2), at: 3), fix(source(0, 2, generation: 1), at: 4),
                     fix(source(1, 1, generation: 2), at: 5)]
        let request = try #require(Coalescer.coalesce(vehicle: vehicle, fixes: fixes, newestAcceptedMilliseconds: nil, pastLimit: 100).request)
        #expect(Array(request.partitions) == [PartitionGeneration(p1, 2), PartitionGeneration(p0, 2), PartitionGeneration(p0, 1)],
                "the newest fix's partition first, then the others as their records come")
        let finished = ledger.finish(request)
        #expect(finished)
        #expect(Set(ledger.offsetsToCommit()) == [TopicPartitionOffset(p0, offset: 2), TopicPartitionOffset(p1, offset: 2)])
        #expect(ledger.unfinishedRecords == 3, "p0's 2 and 3 and p1's 2 are left; the old assignment's record counted nothing")

        let stale = [fix(source(0, 3, generation: 1), at: 6), fix(source(1, 2, generation: 1), at: 7)]
        let elsewhere = try #require(Coalescer.coalesce(vehicle: vehicle, fixes: stale, newestAcceptedMilliseconds: nil, pastLimit: 100).request)
        let finishedElsewhere = ledger.finish(elsewhere)
        #expect(!finishedElsewhere, "records of an assignment no longer held finish nothing")
        #expect(ledger.unfinishedRecords == 3)
    }

    /// Records of a backlog finish a vehicle at a time, all over the partition: whatever the
    /// order, the commit offset is the lowest unfinished one, a record finishes once, and the
    /// books hold no more than about twice the unfinished records.
    @Test func recordsFinishingInAnyOrderCommitBelowTheLowestUnfinished() {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<20 {
            var progress = PartitionProgress(generation: 1)
            let count = 2_000
            for offset in 0..<Int64(count) {
                let registered = progress.register(offset + 10, at: Moment(start))
                #expect(registered)
            }
            // One record stays unfinished for most of the round, as a stuck one would.
            let stuck = Int64.random(in: 10..<Int64(count + 10), using: &generator)
            var order = (10..<Int64(count + 10)).filter { $0 != stuck }.shuffled(using: &generator)
            if round % 2 == 0 { order.sort() }  // and in consumption order
            order.insert(stuck, at: order.count * 9 / 10)
            var unfinished = Set(10..<Int64(count + 10))
            for (step, offset) in order.enumerated() {
                let finished = progress.finish(offset)
                #expect(finished)
                unfinished.remove(offset)
                if step % 97 == 0 {
                    let again = progress.finish(offset)
                    #expect(!again, "finished twice")
                }
                // Nil while the first record registered is unfinished: nothing moved yet.
                let lowest = unfinished.min() ?? Int64(count + 10)
                #expect(progress.committable == (lowest == 10 ? nil : lowest))
                #expect(progress.unfinishedCount == unfinished.count)
                #expect(progress.storedEntries <= 2 * unfinished.count + 65)
            }
            let unknown = [progress.finish(5), progress.finish(Int64(count + 10))]
            #expect(unknown == [false, false], "never registered")
        }
    }

    /// Offsets with gaps between them (a compacted topic's, transaction markers'), some of them
    /// vast: each registered offset is found, once, and one in a gap never is.
    @Test func recordsWithGapsBetweenTheirOffsetsFinishOnce() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            var progress = PartitionProgress(generation: 1)
            var offsets: [Int64] = []
            var gaps: [Int64] = []
            var next: Int64 = .random(in: 0..<1_000, using: &generator)
            for _ in 0..<1_000 {
                let registered = progress.register(next, at: Moment(start))
                #expect(registered)
                offsets.append(next)
                let gap: Int64 = switch Int.random(in: 0..<100, using: &generator) {
                case 0: .random(in: 1_000_000...1_000_000_000_000, using: &generator)
                case 1..<10: .random(in: 2...50, using: &generator)
                default: 1
                }
                if gap > 1 { gaps.append(next + .random(in: 1..<gap, using: &generator)) }
                next += gap
            }
            for offset in offsets.shuffled(using: &generator) {
                let finished = progress.finish(offset)
                #expect(finished, "offset \(offset) was registered")
                let again = progress.finish(offset)
                #expect(!again, "offset \(offset) finished twice")
                if let inGap = gaps.randomElement(using: &generator) {
                    let unknown = progress.finish(inGap)
                    #expect(!unknown, "offset \(inGap) was never registered")
                }
            }
            #expect(progress.unfinishedCount == 0)
            #expect(progress.committable == offsets.last.map { $0 + 1 })
        }
    }

    /// Offsets 0..<600 of p0 and p1 taken in at `start`: more than the burst of 1,000 records.
    func burstOf1200Records(commitInterval: Duration) -> PartitionLedger {
        var ledger = PartitionLedger(commitInterval: commitInterval, maximumPendingRecords: 50_000, burstRecords: 1_000)
        ledger.assign([p0, p1], generation: 1)
        for offset in 0..<600 {
            _ = ledger.register(source(0, Int64(offset)), at: Moment(start))
            _ = ledger.register(source(1, Int64(offset)), at: Moment(start))
        }
        return ledger
    }

    /// Finished offsets wait for the commit interval, except when every record taken in
    /// finished with a burst's worth uncommitted: a backlog worked off is committed at once,
    /// while a steady state's small rounds (an interval after that) keep to the interval.
    @Test func aBacklogWorkedOffIsCommittedAtOnceAndSmallRoundsAtTheInterval() throws {
        let interval = Duration.seconds(1)
        var ledger = burstOf1200Records(commitInterval: interval)
        ledger.finish(source(0, 0))
        #expect(ledger.scheduleCommit(now: start) == start, "the first commit is due at once")
        let first = try #require(ledger.commitIfDue(now: start).order)
        _ = ledger.commitAnswered(first, failure: nil, now: start)

        let later = start + .milliseconds(200)
        _ = ledger.finish((1..<600).map { source(0, Int64($0)) })
        _ = ledger.finish((0..<599).map { source(1, Int64($0)) })
        #expect(ledger.scheduleCommit(now: later) == start + interval, "records still unfinished: the interval holds")
        ledger.finish(source(1, 599))
        #expect(ledger.scheduleCommit(now: later) == later, "caught up with 1,199 uncommitted: due at once")
        let caughtUp = try #require(ledger.commitIfDue(now: later).order)
        #expect(caughtUp.offsets == [TopicPartitionOffset(p0, offset: 600), TopicPartitionOffset(p1, offset: 600)])
        _ = ledger.commitAnswered(caughtUp, failure: nil, now: later)

        // Small rounds, once an interval passed since the relay caught up.
        let round = later + interval + .milliseconds(100)
        for offset in 600..<700 { _ = ledger.register(source(0, Int64(offset)), at: Moment(round)) }
        _ = ledger.finish((600..<700).map { source(0, Int64($0)) })
        #expect(ledger.scheduleCommit(now: round) == round, "an interval since the last commit: due")
        let roundCommit = try #require(ledger.commitIfDue(now: round).order)
        _ = ledger.commitAnswered(roundCommit, failure: nil, now: round)
        let next = round + .milliseconds(100)
        for offset in 700..<800 { _ = ledger.register(source(0, Int64(offset)), at: Moment(next)) }
        _ = ledger.finish((700..<800).map { source(0, Int64($0)) })
        #expect(ledger.unfinishedRecords == 0)
        #expect(ledger.scheduleCommit(now: next) == round + interval, "caught up with 100 uncommitted: the interval holds")
        #expect(ledger.commitIfDue(now: next).order == nil)
        #expect(ledger.commitIfDue(now: round + interval).order?.offsets == [TopicPartitionOffset(p0, offset: 800)])
    }

    /// A burst worked off is committed at once even when an interval's commit, ordered while
    /// the burst's last records were under way, took nearly all of it, and so is the backlog's
    /// tail when it arrives within an interval: neither waits a whole interval after the relay
    /// caught up.
    @Test func aBurstIsCommittedAtOnceWhenCaughtUpAfterAnIntervalCommitTookMostOfIt() throws {
        let interval = Duration.seconds(1)
        var ledger = burstOf1200Records(commitInterval: interval)
        _ = ledger.finish((0..<600).map { source(0, Int64($0)) })
        _ = ledger.finish((0..<550).map { source(1, Int64($0)) })
        #expect(ledger.scheduleCommit(now: start) == start, "the first commit is due at once")
        let first = try #require(ledger.commitIfDue(now: start).order)
        _ = ledger.commitAnswered(first, failure: nil, now: start)

        let later = start + .milliseconds(200)
        _ = ledger.finish((550..<600).map { source(1, Int64($0)) })
        #expect(ledger.unfinishedRecords == 0 && ledger.uncommittedRecords == 50)
        #expect(ledger.scheduleCommit(now: later) == later, "caught up after a burst: due at once, not at the interval")
        let caughtUp = try #require(ledger.commitIfDue(now: later).order)
        #expect(caughtUp.offsets == [TopicPartitionOffset(p1, offset: 600)])
        _ = ledger.commitAnswered(caughtUp, failure: nil, now: later)

        // The backlog's tail, fetched after the relay first caught up: less than a burst.
        let tail = later + .milliseconds(300)
        for offset in 600..<700 { _ = ledger.register(source(0, Int64(offset)), at: Moment(tail)) }
        _ = ledger.finish((600..<700).map { source(0, Int64($0)) })
        #expect(ledger.scheduleCommit(now: tail) == tail, "caught up again within an interval of the burst: due at once")
        let tailCommit = try #require(ledger.commitIfDue(now: tail).order)
        #expect(tailCommit.offsets == [TopicPartitionOffset(p0, offset: 700)])
        _ = ledger.commitAnswered(tailCommit, failure: nil, now: tail)

        // The steady state after it keeps to the interval.
        let steady = later + interval + .milliseconds(100)
        for offset in 700..<710 { _ = ledger.register(source(0, Int64(offset)), at: Moment(steady)) }
        _ = ledger.finish((700..<710).map { source(0, Int64($0)) })
        #expect(ledger.scheduleCommit(now: steady) == tail + interval, "an interval after catching up: the interval holds")
    }

    /// An answer applies only to the generation its order was made under, and a late answer of
    /// an earlier order never takes the committed offset back.
    @Test func commitAnswersApplyToTheirGenerationAndNeverMoveBack() throws {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 100, burstRecords: 1_000)
        ledger.assign([p0], generation: 1)
        for offset in 0..<4 { _ = ledger.register(source(0, Int64(offset)), at: Moment(start)) }
        ledger.finish(source(0, 0))
        let due = ledger.scheduleCommit(now: start)
        #expect(due == start)
        let ordered = ledger.commitIfDue(now: start)
        let first = try #require(ordered.order)
        let limit = PipelineLimits.commitAnswerLimit
        ledger.finish(source(0, 1))
        let expired = ledger.commitIfDue(now: start + limit)
        #expect(expired.failure != nil, "an order unanswered past its limit counts as failed")
        let second = try #require(expired.order)
        _ = ledger.commitAnswered(second, failure: nil, now: start + limit)
        _ = ledger.commitAnswered(first, failure: nil, now: start + limit)
        #expect(ledger.lastCommittedOffsets[p0] == 2, "the earlier order's late answer changes nothing")

        ledger.assign([p0], generation: 2)
        _ = ledger.register(source(0, 4, generation: 2), at: Moment(start))
        _ = ledger.commitAnswered(CommitOrder(id: 9, offsets: [TopicPartitionOffset(p0, offset: 3)], generations: [p0: 1]),
                                  failure: nil, now: start + limit)
        #expect(ledger.lastCommittedOffsets[p0] == nil, "an answer for the earlier generation says nothing of this one")
    }

    /// A partition pauses at its share and resumes at half of it; the shares follow the
    /// assignment; pausing every partition overrides them; each change of the wish is numbered,
    /// and handed out only when a share flipped (or when the caller says it changed).
    @Test func thePauseWishFollowsTheSharesAndIsNumbered() throws {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 8, burstRecords: 1_000)
        ledger.assign([p0, p1], generation: 1)
        #expect(ledger.share == 4)
        for offset in 0..<4 { _ = ledger.register(source(0, Int64(offset)), at: Moment(start)) }
        ledger.updateShare(p0)
        ledger.updateShare(p1)
        let announced = ledger.pauseChange(always: false, recordsWait: false)
        let first = try #require(announced)
        #expect(first.wish == [p0] && first.pausing == [p0] && first.resuming.isEmpty)
        let unchanged = ledger.pauseChange(always: false, recordsWait: false)
        #expect(unchanged == nil, "no share flipped")
        ledger.finish(source(0, 0))
        ledger.updateShare(p0)
        let aboveHalf = ledger.pauseChange(always: false, recordsWait: false)
        #expect(aboveHalf == nil, "3 of 4: above half")
        ledger.finish(source(0, 1))
        ledger.updateShare(p0)
        let atHalf = ledger.pauseChange(always: false, recordsWait: false)
        let resumed = try #require(atHalf)
        #expect(resumed.wish.isEmpty && resumed.resuming == [p0] && resumed.sequence > first.sequence)
        ledger.pausesEveryPartition = true
        let unflipped = ledger.pauseChange(always: false, recordsWait: true)
        #expect(unflipped == nil, "no share flipped: the caller says when the wish changed")
        let always = ledger.pauseChange(always: true, recordsWait: true)
        let every = try #require(always)
        #expect(every.wish == [p0, p1] && every.sequence > resumed.sequence && every.pausing.isEmpty && every.recordsWait)
    }

    /// Work under way learns that its partition's generation ended from the flag it was handed,
    /// without asking the ledger: set when the revoke begins, or when the partition is assigned anew.
    @Test func workUnderWayLearnsOfARevokeFromItsFlag() {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 100, burstRecords: 1_000)
        ledger.assign([p0, p1], generation: 1)
        let onP0 = ledger.beginWork(on: ShortList(PartitionGeneration(p0, 1)))
        let onP1 = ledger.beginWork(on: ShortList(PartitionGeneration(p1, 1)))
        #expect(onP0.count == 1 && !onP0[0].isSet && !onP1[0].isSet)
        ledger.beginRevoke([p0])
        #expect(onP0[0].isSet, "the revoke began")
        #expect(!onP1[0].isSet, "another partition goes on")
        ledger.assign([p1], generation: 2)
        #expect(onP1[0].isSet, "assigned anew: the earlier generation's work is not ours")
        let stale = ledger.beginWork(on: ShortList(PartitionGeneration(p1, 1)))
        #expect(stale.isEmpty, "no flag for a generation no longer held")
    }

    /// A revoke stops new work on its partitions, counts the work under way and hands back the
    /// final offset.
    @Test func aRevokeEndsOwnershipAndReturnsTheFinalOffset() {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 100, burstRecords: 1_000)
        ledger.assign([p0], generation: 1)
        _ = ledger.register(source(0, 0), at: Moment(start))
        _ = ledger.register(source(0, 1), at: Moment(start))
        ledger.beginWork(on: ShortList(PartitionGeneration(p0, 1)))
        ledger.beginRevoke([p0])
        #expect(!ledger.owns(source(0, 1)))
        #expect(ledger.workUnderWay(in: [p0]) == 1)
        ledger.finish(source(0, 0))
        let idle = ledger.endWork(on: ShortList(PartitionGeneration(p0, 1)))
        #expect(idle, "the last work ended")
        let final = ledger.finishRevoke([p0])
        #expect(final == [TopicPartitionOffset(p0, offset: 1)])
        #expect(ledger.unfinishedRecords == 0 && ledger.assignedPartitions.isEmpty)
    }

    /// Only records of a partition held under their own generation, and not being revoked,
    /// are taken in: a record fetched before a reassignment, or while a revoke waits, is not.
    @Test func recordsAreTakenInOnlyFromPartitionsHeldUnderTheirGeneration() {
        var ledger = PartitionLedger(commitInterval: .seconds(1), maximumPendingRecords: 100, burstRecords: 1_000)
        ledger.assign([p0, p1], generation: 2)
        let current = ledger.register(source(0, 0, generation: 2), at: Moment(start))
        let earlier = ledger.register(source(0, 1, generation: 1), at: Moment(start))
        let unassigned = ledger.register(source(2, 0, generation: 2), at: Moment(start))
        ledger.beginRevoke([p1])
        let revoking = ledger.register(source(1, 0, generation: 2), at: Moment(start))
        let other = ledger.register(source(0, 1, generation: 2), at: Moment(start))
        #expect(current)
        #expect(!earlier, "fetched under an earlier generation")
        #expect(!unassigned, "a partition not assigned")
        #expect(!revoking, "its partition is being revoked")
        #expect(other, "another partition goes on")
        #expect(ledger.unfinishedRecords == 2)
        #expect(ledger.offsetsToCommit().isEmpty, "nothing finished")
    }
}

/// The list a request keeps its partitions and their revocation flags in.
@Suite struct ShortListTests {
    @Test func keepsItsElementsInTheOrderAppended() {
        var list = ShortList<Int>()
        #expect(list.isEmpty)
        #expect(Array(list) == [])
        list.append(7)
        #expect(Array(list) == [7])
        list.append(3)
        list.append(9)
        #expect(Array(list) == [7, 3, 9])
        #expect(list.count == 3)
        #expect(list[2] == 9)
        #expect(Array(ShortList(7)) == [7])
    }
}

@Suite struct VehicleSchedulerTests {
    let start = ContinuousClock.now
    let vehicle = VehicleIdentity(kind: .vehicle, id: "v")

    func fix(_ offset: Int64, at time: Int64) -> PendingFix {
        PendingFix(update: LocationUpdate(vehicle: vehicle, fix: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: time)),
                   source: RecordSource(KafkaRecord(topic: "t", partition: 0, offset: offset, key: nil, value: [],
                                                    assignmentGeneration: 1)))
    }

    /// One request per vehicle at a time: fixes arriving meanwhile coalesce into the next, and
    /// those not newer than what Fleet Engine holds come back stale.
    @Test func oneRequestAtATimeAndStaleFixesComeBack() throws {
        var scheduler = VehicleScheduler(pastLocations: 10, minimumInterval: .zero, holdsPartialRequests: false)
        _ = scheduler.enqueue(fix(0, at: 100), now: start)
        let taken = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        let first = try #require(taken.request)
        #expect(first.liveCheckEpoch == 1, "the first request of an epoch reads the live location")
        _ = scheduler.enqueue(fix(1, at: 90), now: start)
        _ = scheduler.enqueue(fix(2, at: 200), now: start)
        let meanwhile = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        #expect(meanwhile.request == nil, "nothing while the first is under way")
        scheduler.learn(first, newestKnownMilliseconds: 100)
        scheduler.answered(first, checkedEpoch: 1, now: start)
        _ = scheduler.requestEnded(first, now: start)
        let next = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        #expect(next.stale.map(\.source.offset) == [1])
        #expect(next.request?.sources.map(\.offset) == [2])
        #expect(next.request?.liveCheckEpoch == nil, "the epoch's live location was taken into account")
    }

    /// A failed vehicle waits out its backoff deferred, counted as failing at Fleet Engine, and
    /// comes back ready when its time came.
    @Test func aRetryDefersTheVehicleAndCountsIt() throws {
        var scheduler = VehicleScheduler(pastLocations: 10, minimumInterval: .zero, holdsPartialRequests: false)
        _ = scheduler.enqueue(fix(0, at: 100), now: start)
        let taken = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        let request = try #require(taken.request)
        let putBack = scheduler.putBack(request, owns: { _ in true })
        #expect(putBack)
        let due = scheduler.retry(request, VehicleLane.Retry(attempts: 1, since: start, fleetEngine: true),
                                  backoff: .seconds(2), now: start)
        #expect(due == start + .seconds(2))
        #expect(scheduler.vehiclesFailing == 1)
        _ = scheduler.requestEnded(request, now: start)
        #expect(!scheduler.hasReadyVehicles, "deferred, not ready")
        _ = scheduler.releaseDue(now: start + .seconds(2))
        let retaken = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        let again = try #require(retaken.request)
        #expect(again.retryAttempts == 1 && again.sources.map(\.offset) == [0])
    }

    /// A transient failure retries after the policy's backoff until the deadline, then gives
    /// up with how long it tried; at shutdown nothing is kept.
    @Test func aFailedRequestRetriesUntilItsDeadlineThenGivesUp() throws {
        var scheduler = VehicleScheduler(pastLocations: 10, minimumInterval: .zero, holdsPartialRequests: false)
        let policy = RetryPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(8))
        let failure = TransientFailure(cause: .status(503), detail: "down", retryAfterSeconds: nil)
        _ = scheduler.enqueue(fix(0, at: 100), now: start)
        let firstTaken = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        let first = try #require(firstTaken.request)
        let retried = scheduler.failed(first, failure, policy: policy, deadline: .seconds(10), keepsFixes: true,
                                       owns: { _ in true }, now: start, random: { $0.upperBound })
        #expect(retried == .retrying(due: start + .seconds(1)))
        _ = scheduler.requestEnded(first, now: start)
        _ = scheduler.releaseDue(now: start + .seconds(1))
        let secondTaken = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        let second = try #require(secondTaken.request)
        #expect(second.retryAttempts == 1 && second.failingSince == start)
        let gaveUp = scheduler.failed(second, failure, policy: policy, deadline: .seconds(10), keepsFixes: true,
                                      owns: { _ in true }, now: start + .seconds(12), random: { $0.upperBound })
        #expect(gaveUp == .gaveUp(detail: "Gave up after 2 attempts in 12 s; last cause: http_503: down"))
        #expect(scheduler.vehiclesFailing == 0)
        _ = scheduler.requestEnded(second, now: start + .seconds(12))
        _ = scheduler.enqueue(fix(1, at: 200), now: start + .seconds(12))
        let thirdTaken = scheduler.takeReady(epoch: 1, readsLiveLocationEveryTime: false, owns: { _ in true })
        let third = try #require(thirdTaken.request)
        let dropped = scheduler.failed(third, failure, policy: policy, deadline: nil, keepsFixes: false,
                                       owns: { _ in true }, now: start + .seconds(13), random: { $0.upperBound })
        #expect(dropped == .dropped)
        #expect(scheduler.queuedFixes == 0, "nothing kept at shutdown")
    }

    /// Holding waits for a full request (`pastLocations` + 1 fixes) until released.
    @Test func aHoldingVehicleWaitsForAFullRequest() {
        var scheduler = VehicleScheduler(pastLocations: 2, minimumInterval: .zero, holdsPartialRequests: true)
        _ = scheduler.enqueue(fix(0, at: 100), now: start)
        _ = scheduler.enqueue(fix(1, at: 200), now: start)
        #expect(!scheduler.hasReadyVehicles)
        _ = scheduler.enqueue(fix(2, at: 300), now: start)
        #expect(scheduler.hasReadyVehicles, "three fixes fill a request")
    }
}

/// The timer rings only for a deadline earlier than the one it sleeps until.
@Suite struct DeadlineTimerTests {
    @Test func onlyAnEarlierDeadlineWakesASleepingTimer() {
        let start = ContinuousClock.now
        var timer = DeadlineTimer()
        var rings: [Bool] = []
        rings.append(timer.mustWake(for: start))  // an awake timer reads the next deadline itself
        _ = timer.sleep(until: start + .seconds(10))
        rings.append(timer.mustWake(for: start + .seconds(11)))
        rings.append(timer.mustWake(for: start + .seconds(5)))
        rings.append(timer.mustWake(for: start + .seconds(7)))  // already woken for an earlier one
        rings.append(timer.mustWake(for: start + .seconds(3)))
        timer.woke()
        rings.append(timer.mustWake(for: start))
        #expect(rings == [false, false, true, false, true, false])
    }
}

/// The timer's sleep: a deadline on an event loop, cut short by a ring.
@Suite struct AlarmTests {
    let loop = MultiThreadedEventLoopGroup.singleton.next()

    @Test func aSleepEndsAtItsDeadline() async {
        let alarm = Alarm()
        let deadline = ContinuousClock.now + .milliseconds(50)
        let woke = await answered(within: .seconds(30)) { await alarm.sleep(until: deadline, on: self.loop); return ContinuousClock.now }
        #expect(woke.map { $0 >= deadline } == true, "woke at \(String(describing: woke)), deadline \(deadline)")
    }

    /// Whether the ring comes before the sleep began or during it, the sleep ends.
    @Test func aRingEndsASleepLongBeforeItsDeadline() async {
        let alarm = Alarm()
        let sleeping = Task { await alarm.sleep(until: .now + .seconds(3600), on: loop) }
        alarm.ring()
        #expect(await answered(within: .seconds(30)) { await sleeping.value } != nil)
    }

    /// A ring while nobody sleeps is kept: the next sleep returns at once, so a deadline set
    /// between reading the next one and going to sleep is not slept past.
    @Test func aRingWhileNobodySleepsEndsTheNextSleepAtOnce() async {
        let alarm = Alarm()
        alarm.ring()
        let ended = await answered(within: .seconds(30)) { await alarm.sleep(until: .now + .seconds(3600), on: self.loop); return true }
        #expect(ended == true)
        let kept = await answered(within: .milliseconds(300)) { await alarm.sleep(until: .now + .seconds(3600), on: self.loop); return true }
        #expect(kept == nil, "one ring ends one sleep")
        alarm.ring()
    }

    @Test func cancellingTheSleeperEndsItsSleep() async {
        let alarm = Alarm()
        let sleeping = Task { await alarm.sleep(until: .now + .seconds(3600), on: loop) }
        sleeping.cancel()
        #expect(await answered(within: .seconds(30)) { await sleeping.value } != nil)
    }
}

@Suite struct PacingTests {
    let start = ContinuousClock.now

    /// An outage begins when more than half the vehicles held fail at Fleet Engine and ends
    /// once at most a third do; a signer failure begins none.
    @Test func anOutageBeginsAtMostVehiclesAndEndsAtAThird() {
        var pacing = Pacing(concurrency: nil, learnedRate: nil, maximumRequestsPerSecond: nil, now: start)
        let unavailable = TransientFailure(cause: .status(503), detail: "")
        let half = pacing.updateOutage(failing: 5, vehicles: 10, failure: unavailable, now: start)
        #expect(half == nil, "half is not most")
        let signer = pacing.updateOutage(failing: 6, vehicles: 10, failure: TransientFailure(cause: .signer, detail: ""),
                                         now: start)
        #expect(signer == nil)
        let most = pacing.updateOutage(failing: 6, vehicles: 10, failure: unavailable, now: start)
        #expect(most == .began(failingVehicles: 6, vehicles: 10, failure: unavailable))
        let aboveAThird = pacing.updateOutage(failing: 4, vehicles: 10, failure: nil, now: start + .seconds(5))
        #expect(aboveAThird == nil, "above a third")
        let aThird = pacing.updateOutage(failing: 3, vehicles: 10, failure: nil, now: start + .seconds(7))
        #expect(aThird == .ended(lasted: .seconds(7)))
    }

    /// The budget hands out its burst, then names the moment of its next token; the limit
    /// leaves no room once as many attempts as it allows are under way.
    @Test func theBudgetAndTheLimitPaceStarts() {
        var pacing = Pacing(concurrency: ConcurrencyLimit.Settings(maximum: 2), learnedRate: nil, maximumRequestsPerSecond: 20, now: start)
        #expect(pacing.hasRoom(underWay: 1) && !pacing.hasRoom(underWay: 2))
        let token = pacing.waitForToken(now: start)
        #expect(token == nil, "the burst's one token")
        pacing.spend(requests: 1, now: start)
        let due = pacing.waitForToken(now: start)
        #expect(due == start + .milliseconds(50) && pacing.budgetDue == due)
        pacing.deadlineReached(now: start + .milliseconds(50))
        #expect(pacing.budgetDue == nil)
        let next = pacing.waitForToken(now: start + .milliseconds(50))
        #expect(next == nil)
    }
}

extension PartitionLedger {
    /// Records finished one after another; true when any was of a partition's current generation.
    @discardableResult
    mutating func finish(_ sources: [RecordSource]) -> Bool {
        var anyFinished = false
        for source in sources where finish(source) { anyFinished = true }
        return anyFinished
    }
}

extension VehicleScheduler {
    /// A fix queued at `now`, its `Moment` made here as the pipeline makes one per chunk.
    mutating func enqueue(_ fix: consuming PendingFix, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        enqueue(fix, now: now, moment: Moment(now))
    }
}
