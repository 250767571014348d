import FleetEngine
import FleetModel
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
        core.observe(core.state.deadlineReached(now: core.now))
        let order = try #require(core.commits.last)
        #expect(order.offsets == [core.offset(0, 13)])
        core.observe(core.state.commitAnswered(order, failure: nil, now: core.now))
        #expect(core.state.offsetsToCommit().isEmpty)
    }

    // MARK: Commits

    /// Commits are deadlines of the state machine: the first finished record is committed at
    /// once, later ones at most once per interval, and never two commits at a time.
    @Test func commitsAreOrderedOneAtATimeAtMostOncePerInterval() throws {
        let core = Core(limits: .init(commitInterval: .seconds(1)))
        #expect(core.state.nextDeadline == core.start + .seconds(150), "nothing to commit: only the idle sweep")
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("b", at: 1, offset: 1)])
        core.complete(try #require(core.request()), .accepted)
        #expect(core.state.nextDeadline == core.now, "a first commit is due at once")
        core.observe(core.state.deadlineReached(now: core.now))
        let first = try #require(core.commits.last)
        #expect(first.offsets == [core.offset(0, 1)])
        core.complete(try #require(core.request()), .accepted)
        core.now = core.start + .seconds(2)
        core.observe(core.state.deadlineReached(now: core.now))
        #expect(core.commits.count == 1, "no second commit while the first awaits its answer")
        #expect(core.state.timerWillSleep() == core.start + PipelineLimits.commitAnswerLimit,
                "the timer sleeps until the answer is due, not in a loop on the overdue commit")
        let answered = core.state.commitAnswered(first, failure: nil, now: core.now)
        core.observe(answered)
        #expect(answered.wakeTimer, "the overdue commit wakes the timer once the answer came")
        #expect(core.state.lastCommittedOffsets == [core.partition(0): 1])
        #expect(core.state.nextDeadline <= core.now, "what finished meanwhile is due: the interval has passed")
        core.observe(core.state.deadlineReached(now: core.now))
        #expect(core.commits.last?.offsets == [core.offset(0, 2)])
    }

    @Test func aCommitRefusedOrUnansweredIsOrderedAgain() throws {
        let core = Core(limits: .init(commitInterval: .seconds(1)))
        core.consume([core.fix("a", at: 1, offset: 0)])
        core.complete(try #require(core.request()), .accepted)
        core.observe(core.state.deadlineReached(now: core.now))
        let refused = try #require(core.commits.last)
        core.observe(core.state.commitAnswered(refused, failure: "REBALANCE_IN_PROGRESS", now: core.now))
        #expect(core.state.lastCommittedOffsets.isEmpty, "a refused commit committed nothing")
        #expect(core.state.nextDeadline == core.start + .seconds(1), "again one interval after the last order")
        core.now = core.start + .seconds(1)
        core.observe(core.state.deadlineReached(now: core.now))
        let unanswered = try #require(core.commits.last)
        #expect(unanswered.id != refused.id && unanswered.offsets == refused.offsets)
        core.now += PipelineLimits.commitAnswerLimit
        core.observe(core.state.deadlineReached(now: core.now))
        #expect(core.commitFailures.count == 1, "no answer within the limit counts as failed")
        #expect(core.commits.count == 3 && core.commits.last?.offsets == refused.offsets, "and it is ordered again")
        core.observe(core.state.commitAnswered(unanswered, failure: nil, now: core.now))
        #expect(core.state.lastCommittedOffsets == [core.partition(0): 1], "a late answer still tells a kept partition's position")
    }

    /// Kafka refuses the order as it is handed over, inside the timer's turn: that is its answer,
    /// nothing is committed, and it is ordered again one interval later.
    @Test func aCommitRefusedAsItIsHandedOverIsOrderedAgain() throws {
        let core = Core(limits: .init(commitInterval: .seconds(1)))
        core.consume([core.fix("a", at: 1, offset: 0)])
        core.complete(try #require(core.request()), .accepted)
        var handed: [CommitOrder] = []
        core.observe(core.state.deadlineReached(now: core.now) { order in
            handed.append(order)
            return "Local: No offset stored"
        })
        #expect(handed.map(\.offsets) == [[core.offset(0, 1)]])
        #expect(core.commitFailures == ["Local: No offset stored"])
        #expect(core.state.lastCommittedOffsets.isEmpty)
        #expect(core.state.nextDeadline == core.start + .seconds(1), "again one interval after the refused order")
        core.now = core.start + .seconds(1)
        core.observe(core.state.deadlineReached(now: core.now))
        #expect(core.commits.last?.offsets == [core.offset(0, 1)] && core.commits.last?.id != handed[0].id)
    }

    /// Records taken in are counted by partition however their partitions alternate in a
    /// chunk; those refused (a partition not ours, an offset taken in before) are not.
    @Test func recordsTakenInAreCountedByPartition() {
        let core = Core(partitions: [0, 1])
        let chunk: [ConsumedRecord] = [
            core.fix("a", at: 1, offset: 0), core.fix("b", at: 1, offset: 1), core.fix("c", at: 1, offset: 0, partition: 1),
            core.fix("d", at: 1, offset: 2), core.fix("e", at: 1, offset: 1, partition: 1), core.fix("f", at: 1, offset: 0, partition: 2),
            core.fix("g", at: 1, offset: 3), core.fix("h", at: 1, offset: 1, partition: 1),
        ]
        let (_, taken) = core.state.consume(chunk, now: core.now)
        #expect(taken.perPartition == [core.partition(0): 4, core.partition(1): 2],
                "partition 2 is not assigned; offset 1 of partition 1 came twice")
    }

    /// A commit's answer arrives after its partition was revoked, or revoked and assigned to
    /// this member again: it says nothing about the partition as it is now owned.
    @Test func aCommitAnswerForARevokedOrReassignedPartitionChangesNothing() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("b", at: 1, offset: 0, partition: 1)])
        core.complete(try #require(core.request()), .accepted)
        core.complete(try #require(core.request()), .accepted)
        core.observe(core.state.deadlineReached(now: core.now))
        let order = try #require(core.commits.last)
        #expect(order.offsets == [core.offset(0, 1), core.offset(1, 1)])
        core.state.beginRevoke([core.partition(0), core.partition(1)])
        _ = core.state.finishRevoke([core.partition(0), core.partition(1)])
        core.observe(core.state.assign([core.partition(1)], generation: 2))
        core.consume([core.fix("c", at: 1, offset: 5, partition: 1, generation: 2)])
        core.observe(core.state.commitAnswered(order, failure: nil, now: core.now))
        #expect(core.state.lastCommittedOffsets.isEmpty, "partition 0 is gone; partition 1 is owned under a new generation")
        #expect(core.state.uncommittedRecords == 1)
        core.complete(try #require(core.request()), .accepted)
        #expect(core.state.offsetsToCommit() == [core.offset(1, 6)])
    }

    /// A partition being revoked is committed by its revoke, not by a periodic commit racing it.
    @Test func aPartitionBeingRevokedIsLeftToItsRevokesCommit() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("b", at: 1, offset: 0, partition: 1)])
        let onRevoked = try #require(core.request())
        core.complete(try #require(core.request()), .accepted)
        core.state.beginRevoke([core.partition(0)])
        core.complete(onRevoked, .accepted)
        core.observe(core.state.deadlineReached(now: core.now))
        #expect(core.commits.last?.offsets == [core.offset(1, 1)])
        #expect(core.state.finishRevoke([core.partition(0)]).offsets == [core.offset(0, 1)])
    }

    @Test func aRejectedRequestHoldsTheCommitUntilItsDeadLetterIsWritten() throws {
        let core = Core()
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("a", at: 2, offset: 1)])
        let request = try #require(core.request())
        core.complete(request, .rejected(.invalid, detail: "400"))
        #expect(core.deadLetters.map(\.source.offset).sorted() == [0, 1])
        #expect(core.state.offsetsToCommit().isEmpty)
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 2, "a revoke waits for dead letters under way")
        for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source, now: core.now)) }
        #expect(core.state.offsetsToCommit() == [core.offset(0, 2)])
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 0)
    }

    @Test func aBadRecordIsOrderedDeadLetteredAndHoldsTheCommitUntilWritten() throws {
        let core = Core()
        let bad = core.record(offset: 0)
        core.consume([.bad(bad, reason: .notJSON, detail: "x"), core.fix("a", at: 1, offset: 1)])
        #expect(core.deadLetters.map(\.reason) == [.badRecord(.notJSON)])
        core.complete(try #require(core.request()), .accepted)
        #expect(core.state.offsetsToCommit().isEmpty)
        core.observe(core.state.deadLetterWritten(bad, now: core.now))
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

    /// A revoke cancels nothing: a cancelled update may still be applied by Fleet Engine after
    /// the next owner's newer fix. It waits until the request under way was answered.
    @Test func aRevokeStopsNewWorkOnItsPartitionsAndWaitsForTheAnswersUnderWay() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("w", at: 1, offset: 0, partition: 1)])
        let onRevoked = try #require(core.request())
        let onKept = try #require(core.request())
        core.consume([core.fix("v", at: 2, offset: 1)])
        core.state.beginRevoke([core.partition(0)])
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 1, "under way until it is answered")
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

    /// A revoke commits what finished before it waits for the work under way (a member dropped
    /// while it waits can commit nothing), and its final commit then carries only what finished
    /// during the wait; partitions kept are not part of either.
    @Test func aRevokeCommitsWhatFinishedBeforeWaitingAndAfterwardsOnlyWhatFinishedSince() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("w", at: 1, offset: 0, partition: 1)])
        core.complete(try #require(core.request()), .accepted)
        core.complete(try #require(core.request()), .accepted)
        core.consume([core.fix("v", at: 2, offset: 1)])
        let underWay = try #require(core.request())
        core.state.beginRevoke([core.partition(0)])
        let early = core.state.offsetsToCommit(revoking: [core.partition(0), core.partition(1)])
        #expect(early == [core.offset(0, 1)], "what finished on the revoked partition, and nothing of the kept one")
        core.state.committedDuringRevoke(early)
        #expect(core.state.offsetsToCommit(revoking: [core.partition(0)]).isEmpty)
        core.complete(underWay, .accepted)
        let (final, _) = core.state.finishRevoke([core.partition(0)])
        #expect(final == [core.offset(0, 2)], "the final commit carries what finished during the wait")

        let idle = Core(partitions: [0])
        idle.consume([idle.fix("v", at: 1, offset: 0)])
        idle.complete(try #require(idle.request()), .accepted)
        idle.state.beginRevoke([idle.partition(0)])
        idle.state.committedDuringRevoke(idle.state.offsetsToCommit(revoking: [idle.partition(0)]))
        #expect(idle.state.finishRevoke([idle.partition(0)]).offsets.isEmpty, "nothing finished since: no second commit")
    }

    /// A request on a revoked partition that fails transiently is not tried again by this
    /// member: its fixes stay unfinished for the next owner, and the vehicle counts as failing no more.
    @Test func aRequestFailingDuringItsPartitionsRevokeIsLeftForTheNextOwner() throws {
        let core = Core(partitions: [0, 1])
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("w", at: 1, offset: 0, partition: 1)])
        let onRevoked = try #require(core.request())
        core.state.beginRevoke([core.partition(0)])
        core.retry(onRevoked, after: .seconds(1))
        #expect(core.state.workUnderWay(in: [core.partition(0)]) == 0)
        #expect(core.state.vehiclesFailing == 0)
        core.observe(core.state.deadlineReached(now: core.start + .seconds(2)))
        #expect(try #require(core.request()).update.vehicle.id == "w", "v is not tried again")
        let (offsets, _) = core.state.finishRevoke([core.partition(0)])
        #expect(offsets.isEmpty, "the failed record stays uncommitted for the next owner")
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
                    ? ConsumedRecord.bad(core.record(offset: offset, partition: partition), reason: .notJSON, detail: "")
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
                core.retry(request, after: .milliseconds(5), cause: random.next() % 2 == 0 ? .signer : .status(503))
                continue
            case 1:
                core.complete(request, .rejected(.invalid, detail: ""))
                settled["dead-lettered", default: 0] += request.sources.count
            default:
                sentTimes[request.update.vehicle.id] = time
                core.complete(request, .accepted)
                settled["accepted", default: 0] += request.sources.count
            }
            core.now += .milliseconds(1)
            core.observe(core.state.deadlineReached(now: core.now))
            for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source, now: core.now)) }
            core.deadLetters = []
        }
        var rounds = 0
        while !inFlight.isEmpty || core.state.queuedFixes > 0 || !core.deadLetters.isEmpty, rounds < 1_000 {
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
            for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source, now: core.now)) }
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
        core.state.beginRevoke([core.partition(0), core.partition(1)])
        let revoked = core.state.finishRevoke([core.partition(0), core.partition(1)])
        core.observe(revoked.pause)
        #expect(core.pauseWish.isEmpty, "a revoked partition's pause must not stay in the wish")
        let assigned = core.state.assign([core.partition(0), core.partition(1)], generation: 2)
        #expect(assigned?.wish == [], "a new assignment hands out a fresh wish, though it equals the last: fetch everything")
        #expect(core.state.pauseWish.isEmpty)
    }

    @Test func aSmallerShareAfterAnAssignmentPausesAPartitionAlreadyOverIt() throws {
        let core = Core(limits: .init(maximumPendingRecords: 8), partitions: [0])
        core.consume((0..<5).map { core.fix("v\($0)", at: 1, offset: Int64($0)) })
        #expect(core.pauseWish.isEmpty, "5 of a share of 8")
        core.observe(core.state.assign([core.partition(1)], generation: 2))
        #expect(core.pauseWish == [core.partition(0)], "5 of a share of 4")
    }

    /// A cold start or a backlog leaves its freed memory in the allocator: the state reports
    /// once when a burst of unfinished records has drained, and never for the steady trickle.
    @Test func aDrainedBurstIsReportedOnceAndATrickleNever() throws {
        let core = Core(limits: .init(maximumPendingRecords: 5_000), partitions: [0, 1])
        #expect(core.state.limits.burstRecords == 1_000)
        var drained = 0
        func finish(_ requests: some Sequence<CoalescedRequest>) {
            for request in requests where core.complete(request, .accepted).burstDrained { drained += 1 }
        }
        func finishEverything() {
            while let request = core.request() { finish([request]) }
        }
        core.consume((0..<999).map { core.fix("v\($0 % 9)", at: Int64($0), offset: Int64($0)) })
        finishEverything()
        #expect(drained == 0 && core.state.unfinishedRecords == 0, "999 unfinished at most: no burst")

        // 1,000 records of ten vehicles, 100 each: five vehicles on each partition.
        core.consume((0..<1_000).map {
            core.fix("w\($0 % 10)", at: Int64($0), offset: 999 + Int64($0 / 2), partition: Int32($0 % 2))
        })
        #expect(core.state.unfinishedRecords == 1_000)
        let requests = (0..<10).compactMap { _ in core.request() }
        let onPartition0 = requests.filter { $0.sources[0].topicPartition == core.partition(0) }
        #expect(requests.count == 10 && onPartition0.count == 5)
        finish(onPartition0.prefix(3))
        #expect(drained == 0 && core.state.unfinishedRecords == 700)
        core.state.beginRevoke([core.partition(1)])
        let revoked = core.state.finishRevoke([core.partition(1)])
        core.observe(revoked.pause)
        #expect(core.state.unfinishedRecords == 200, "a revoked partition's records are no longer the relay's")
        #expect(drained == 0)
        finish(onPartition0.dropFirst(3).prefix(1))
        #expect(drained == 1, "down to a tenth of the burst")
        finish(onPartition0.suffix(1))
        core.consume((0..<999).map { core.fix("v\($0 % 9)", at: 1_000 + Int64($0), offset: 1_499 + Int64($0)) })
        finishEverything()
        #expect(drained == 1, "reported once, and the trickle after it is no burst")
        #expect(core.state.unfinishedRecords == 0)
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
        // The request was taken when its lane was the 101st; the sweep moved it to the front.
        core.complete(busy, .accepted)
        core.consume([core.fix("busy", at: 2, offset: 101)])
        let next = try #require(core.request(), "the request's end found its vehicle's lane where the sweep moved it")
        #expect(next.update.vehicle.id == "busy" && next.update.lastLocation.recordedAtMilliseconds == 2)
        core.consume([core.fix("v0", at: 3, offset: 102)])
        core.complete(next, .accepted)
        #expect(core.request()?.update.vehicle.id == "v0", "a lane made after the sweep is found through its new position")
    }

    // MARK: Workers

    /// A worker whose attempt ended asks for its next request in the same event: it takes the
    /// next ready request when no worker waited before it, and waits its turn otherwise.
    @Test func aWorkerWhoseAttemptEndedIsServedInTheSameEvent() throws {
        let alone = Core()
        alone.consume([alone.fix("a", at: 1, offset: 0)])
        let first = try #require(alone.request())
        alone.consume([alone.fix("a", at: 2, offset: 1)])
        let (served, _) = alone.state.complete(first, Delivery(outcome: .accepted, newestKnownMilliseconds: 1), now: alone.now,
                                               thenServe: 1)
        #expect(served.resume.map(\.waiter) == [1])
        #expect(served.resume.first?.request?.update.lastLocation.recordedAtMilliseconds == 2)

        let core = Core()
        core.consume([core.fix("a", at: 1, offset: 0), core.fix("b", at: 1, offset: 1)])
        let a = try #require(core.request())
        _ = try #require(core.request())
        core.consume([core.fix("a", at: 2, offset: 2)])
        #expect(core.request() == nil, "both vehicles are under way: worker 3 waits")
        let (turn, _) = core.state.complete(a, Delivery(outcome: .accepted, newestKnownMilliseconds: 1), now: core.now, thenServe: 1)
        #expect(turn.resume.map(\.waiter) == [3], "worker 3 waited first")
        core.observe(turn)
        _ = core.takeResumed()
        core.consume([core.fix("c", at: 1, offset: 3)])
        #expect(core.resumed.count == 1 && core.resumed[1]??.update.vehicle.id == "c", "worker 1 waited its turn, and took the next vehicle")
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
        try core.commitWhatFinished()
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
        try core.commitWhatFinished()
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
        core.retry(try #require(core.request()), after: .seconds(1), cause: .signer)
        core.observe(core.state.deadlineReached(now: core.start + .seconds(1)))
        #expect(core.request() != nil, "sent after the backoff, not after an interval")
    }

    @Test(arguments: [FailureCause.signer, .status(503), .throttled, .transport(.timeout)])
    func aFailedVehicleWaitsOutItsBackoffWithoutHoldingAWorker(cause: FailureCause) throws {
        let core = Core()
        core.consume([core.fix("cold", at: 1, offset: 0), core.fix("cold", at: 2, offset: 1)])
        let cold = try #require(core.request())
        core.retry(cold, after: .seconds(2), cause: cause)
        #expect(core.state.requestsInFlight == 0)
        core.consume([core.fix("warm", at: 1, offset: 2), core.fix("cold", at: 3, offset: 3)])
        #expect(try #require(core.request()).update.vehicle.id == "warm")
        core.now = core.start + .seconds(1)
        core.observe(core.state.deadlineReached(now: core.now))
        #expect(core.state.readyVehicles == 0)
        core.now = core.start + .seconds(2)
        core.observe(core.state.deadlineReached(now: core.now))
        let retry = try #require(core.request())
        #expect(retry.update.pastLocations.map(\.recordedAtMilliseconds) == [1, 2])
        #expect(retry.update.lastLocation.recordedAtMilliseconds == 3)
        #expect(retry.retryAttempts == 1)
        #expect(retry.failingSince == core.start)
        #expect(core.state.offsetsToCommit().isEmpty, "nothing of the failed vehicle finished")
    }

    // MARK: Faults that hold nothing

    /// Twice as many vehicles as workers fail at Fleet Engine on every attempt: no worker
    /// waits on them, so every healthy vehicle's fix still goes out at once.
    @Test func vehiclesFleetEngineKeepsRefusingHoldNoWorker() throws {
        let core = Core()
        let workers = 4
        core.consume((0..<(2 * workers)).map { core.fix("stuck\($0)", at: 1, offset: Int64($0)) })
        for _ in 0..<(2 * workers) { core.retry(try #require(core.request()), after: .seconds(60)) }
        #expect(core.state.requestsInFlight == 0)
        #expect(core.state.vehiclesFailing == 2 * workers)
        core.consume((0..<100).map { core.fix("healthy\($0)", at: 1, offset: Int64(2 * workers + $0)) })
        var delivered: Set<String> = []
        while let request = core.request() {
            delivered.insert(request.update.vehicle.id)
            core.complete(request, .accepted)
        }
        #expect(delivered == Set((0..<100).map { "healthy\($0)" }))
        #expect(core.state.offsetsToCommit().isEmpty, "the stuck vehicles' records come first and hold the commit")
    }

    /// The due time follows full-jitter backoff: at most initial · 2^attempt, capped, and never
    /// sooner than the server's `Retry-After`.
    @Test func aFailingVehiclesDueTimeFollowsTheBackoffAndRetryAfter() throws {
        let policy = RetryPolicy(initialDelay: .milliseconds(100), maximumDelay: .milliseconds(500))
        let core = Core(limits: .init(retryPolicy: policy))
        core.consume([core.fix("v", at: 1, offset: 0)])
        var dues: [Duration] = []
        for _ in 0..<5 {
            let request = try #require(core.request())
            let failure = TransientFailure(cause: .status(503), detail: "")
            core.observe(core.state.complete(request, Delivery(outcome: .retry(failure)), now: core.now,
                                             random: { $0.upperBound }))
            dues.append(core.state.nextDeadline - core.now)
            core.now = core.state.nextDeadline
            core.observe(core.state.deadlineReached(now: core.now))
        }
        #expect(dues == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(500), .milliseconds(500)])
        let request = try #require(core.request())
        let throttled = TransientFailure(cause: .status(429), detail: "", retryAfterSeconds: 3)
        core.observe(core.state.complete(request, Delivery(outcome: .retry(throttled)), now: core.now,
                                         random: { $0.lowerBound }))
        #expect(core.state.nextDeadline - core.now == .seconds(3))
    }

    /// Past `--retry-deadline`, counted from the vehicle's first failure, its records are
    /// dead-lettered with the last cause, and the partition commits once they are written.
    @Test func aVehicleFailingPastTheRetryDeadlineIsDeadLettered() throws {
        let core = Core(limits: .init(retryDeadline: .seconds(10)))
        core.consume([core.fix("v", at: 1, offset: 0)])
        core.retry(try #require(core.request()), after: .seconds(6))
        core.now = core.start + .seconds(6)
        core.observe(core.state.deadlineReached(now: core.now))
        core.consume([core.fix("v", at: 2, offset: 1)])
        core.retry(try #require(core.request()), after: .seconds(6))
        #expect(core.deadLetters.isEmpty, "6 s of the 10 s deadline")
        core.now = core.start + .seconds(12)
        core.observe(core.state.deadlineReached(now: core.now))
        core.retry(try #require(core.request()), after: .seconds(6), cause: .transport(.timeout))
        #expect(core.deadLetters.map(\.reason) == [.retryDeadlineExceeded, .retryDeadlineExceeded])
        #expect(core.deadLetters.first?.detail.contains("3 attempts in 12 s; last cause: timeout") == true)
        #expect(core.state.vehiclesFailing == 0)
        for order in core.deadLetters { core.observe(core.state.deadLetterWritten(order.source, now: core.now)) }
        #expect(core.state.offsetsToCommit() == [core.offset(0, 2)])
    }

    /// An outage is Fleet Engine failing for most vehicles held, not for a few: it begins once,
    /// when more than half wait to retry, and ends once, when at most a third do.
    @Test func anOutageIsMostVehiclesFailingAndIsReportedOnceEachWay() throws {
        let core = Core()
        core.consume((0..<6).map { core.fix("v\($0)", at: 1, offset: Int64($0)) })
        var requests = try (0..<6).map { _ in try #require(core.request()) }
        core.retry(requests.removeFirst(), after: .seconds(1))
        core.retry(requests.removeFirst(), after: .seconds(1))
        core.retry(requests.removeFirst(), after: .seconds(1))
        #expect(core.outages.isEmpty, "3 of 6 vehicles is not most of them")
        core.retry(requests.removeFirst(), after: .seconds(1), cause: .signer)
        #expect(core.outages.isEmpty, "a signer failure is not Fleet Engine's")
        core.retry(requests.removeFirst(), after: .seconds(1))
        guard case .began(4, 6, let failure)? = core.outages.last else {
            Issue.record("no outage began: \(core.outages)")
            return
        }
        #expect(failure.cause == .status(503))
        core.retry(requests.removeFirst(), after: .seconds(1))
        #expect(core.outages.count == 1, "reported once")
        core.now = core.start + .seconds(1)
        core.observe(core.state.deadlineReached(now: core.now))
        var answered = 0
        while let request = core.request() {
            core.complete(request, .accepted)
            answered += 1
            #expect(core.outages.count == (answered < 3 ? 1 : 2), "ends when 2 of 6 fail (\(answered) answered)")
        }
        #expect(core.outages.last == .ended(lasted: .seconds(1)))
    }

    // MARK: Replay: a window as the input

    /// A replay's history goes out in as few requests as it fits in, oldest first: a vehicle
    /// waits for a full request until the input ends, then sends what is left; then the
    /// workers stop.
    @Test func aHeldVehicleSendsFullRequestsAndTheRestWhenTheInputEnds() throws {
        var limits = PipelineLimits(pastLocations: 2)
        limits.holdsPartialRequests = true
        let core = Core(limits: limits)
        core.consume((0..<7).map { core.fix("a", at: 100 + Int64($0), offset: Int64($0)) }
            + (7..<9).map { core.fix("b", at: 100 + Int64($0), offset: Int64($0)) })
        var sent: [[Int64]] = []
        func send(_ request: CoalescedRequest) {
            sent.append((request.update.pastLocations + [request.update.lastLocation]).map(\.recordedAtMilliseconds))
            core.complete(request, .accepted)
        }
        send(try #require(core.request()))
        send(try #require(core.request()))
        #expect(sent == [[100, 101, 102], [103, 104, 105]])
        #expect(core.request() == nil, "a holds one fix and b two: less than a request each")
        core.observe(core.state.endInput(now: core.now))
        send(try #require(core.takeResumed().first))
        send(try #require(core.request()))
        #expect(Set(sent.suffix(2)) == [[106], [107, 108]])
        #expect(core.request() == nil && core.state.waitingWorkers == 0, "nothing left: a worker is let go at once")
        #expect(core.state.offsetsToCommit() == [core.offset(0, 9)])
    }

    /// Fetching that waits for records to finish must not wait for vehicles that wait for more:
    /// once fetching is paused and only held vehicles are left, they go out.
    @Test func heldVehiclesGoOutWhenFetchingPausesWithNothingElseToDoAndHoldAgainWhenItResumes() throws {
        var limits = PipelineLimits(pastLocations: 1, maximumPendingRecords: 6)
        limits.holdsPartialRequests = true
        let core = Core(limits: limits)
        core.consume((0..<3).map { core.fix("v\($0)", at: 1, offset: Int64($0)) })
        #expect(core.request() == nil, "three vehicles hold a fix each")
        core.consume([core.fix("full", at: 1, offset: 3), core.fix("full", at: 2, offset: 4), core.fix("v3", at: 1, offset: 5)])
        #expect(core.pauseWish == [core.partition(0)])
        let full = try #require(core.takeResumed().first)
        #expect(full.update.vehicle.id == "full" && core.request() == nil,
                "a full request is under way and will finish records: the others go on holding")
        core.complete(full, .accepted)
        #expect(core.pauseWish == [core.partition(0)], "4 of a share of 6: above half")
        var requests = core.takeResumed()
        while let request = core.request() { requests.append(request) }
        #expect(requests.count == 4, "paused with nothing else to do: every held vehicle goes out")
        for request in requests { core.complete(request, .accepted) }
        #expect(core.pauseWish.isEmpty)
        core.consume([core.fix("v4", at: 1, offset: 6)])
        #expect(core.request() == nil, "fetching resumed: vehicles wait for a full request again")
    }

    @Test func aReplayReadsTheLiveLocationBeforeEveryRequest() throws {
        for everyRequest in [false, true] {
            var limits = PipelineLimits()
            limits.readsLiveLocationBeforeEveryRequest = everyRequest
            let core = Core(limits: limits)
            core.consume([core.fix("a", at: 1, offset: 0)])
            let first = try #require(core.request())
            #expect(first.liveCheckEpoch != nil)
            core.complete(first, .accepted, liveChecked: true)
            core.consume([core.fix("a", at: 2, offset: 1)])
            let second = try #require(core.request())
            #expect((second.liveCheckEpoch != nil) == everyRequest)
        }
    }

    // MARK: Shutdown

    @Test func closingIntakeReleasesWorkersOnceTheRequestsUnderWayEnded() throws {
        let core = Core()
        core.consume([core.fix("v", at: 1, offset: 0), core.fix("w", at: 1, offset: 1)])
        let first = try #require(core.request())
        core.consume([core.fix(first.update.vehicle.id, at: 2, offset: 2)])
        let second = try #require(core.request())
        #expect(core.request() == nil)
        core.observe(core.state.closeIntake(now: core.now))
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
    var outages: [FleetEngineOutageChange] = []
    var commits: [CommitOrder] = []
    var commitFailures: [String] = []

    /// Letter writers released: no letter will come any more.
    var letterWritersReleased = 0

    init(limits: PipelineState<Int>.Limits = .init(), partitions: [Int32] = [0]) {
        now = start
        state = PipelineState(limits: limits, now: start)
        observe(state.assign(partitions.map(partition), generation: 1))
        // Letter writers, numbered apart from the request workers; each asks again as soon as it
        // took a letter, so every letter ordered reaches `deadLetters` at once.
        for writer in 1_000_000..<1_000_004 { observe(state.requestLetter(writer, now: now)) }
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
        for (writer, letter) in actions.resumeLetters {
            guard let letter else {
                letterWritersReleased += 1
                continue
            }
            deadLetters.append(letter)
            if letter.reason == .badRecord(.notJSON) { badWritten += 1 }
            observe(state.requestLetter(writer, now: now))
        }
        if let change = actions.pause { pauseWish = change.wish }
        stale += actions.staleFixes
    }

    func observe(_ step: (PipelineActions<Int>, RecordsTakenIn)) { observe(step.0) }

    func observe(_ step: (PipelineActions<Int>, AttemptAftermath)) {
        observe(step.0)
        if let outage = step.1.outage { outages.append(outage) }
    }

    func observe(_ turn: (PipelineActions<Int>, CommitDeadline)) {
        observe(turn.0)
        if let order = turn.1.order { commits.append(order) }
        if let failure = turn.1.failure { commitFailures.append(failure) }
    }

    func observe(_ change: PauseChange?) {
        if let change { pauseWish = change.wish }
    }

    @discardableResult
    func consume(_ records: [ConsumedRecord]) -> PipelineActions<Int> {
        let (actions, taken) = state.consume(records, now: now)
        observe((actions, taken))
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

    /// The commit due now is ordered and answered: committed.
    func commitWhatFinished() throws {
        observe(state.deadlineReached(now: now))
        let order = try #require(commits.last)
        observe(state.commitAnswered(order, failure: nil, now: now))
    }

    /// The attempt failed transiently; the backoff comes out as exactly `delay` (as the
    /// server's `Retry-After`, with no jitter above it).
    @discardableResult
    func retry(_ request: CoalescedRequest, after delay: Duration, cause: FailureCause = .status(503)) -> PipelineActions<Int> {
        let failure = TransientFailure(cause: cause, detail: "", retryAfterSeconds: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
        let (actions, aftermath) = state.complete(request, Delivery(outcome: .retry(failure)), now: now, random: { $0.lowerBound })
        observe((actions, aftermath))
        return actions
    }

    @discardableResult
    func complete(_ request: CoalescedRequest, _ outcome: DeliveryOutcome, newestKnown: Int64? = nil,
                           liveChecked: Bool = false) -> PipelineActions<Int> {
        let newest = newestKnown ?? (outcome == .accepted ? request.update.lastLocation.recordedAtMilliseconds : nil)
        let (actions, aftermath) = state.complete(request, Delivery(outcome: outcome, newestKnownMilliseconds: newest,
                                                                    liveChecked: liveChecked), now: now)
        observe((actions, aftermath))
        return actions
    }
}
