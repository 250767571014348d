import DequeModule
import FleetAuth
import Kafka

/// The relay's core as one value: events in, actions out, no threads, no clock of its own.
///
/// It routes each event to the parts that own its state: the partition ledger (offsets,
/// generations, revokes, shares and the pause wish, commits), the vehicle scheduler (lanes,
/// ready and deferred vehicles, coalescing, holding, retries), the letter queue (dead letters
/// ready, outstanding and due again), the pacing (the concurrency limit, the rate learnt from
/// 429s under the request budget's ceiling, outages) and the deadline timer; it keeps the
/// workers and letter writers waiting for work.
/// The guarantees follow from the parts:
/// - **At-least-once**: an offset is committable only when every record at or below it
///   finished (accepted, superseded, stale or dead-lettered).
/// - **Never backwards**: one request per vehicle at a time, built only after the previous
///   one was answered; fixes not newer than what Fleet Engine holds are never sent; the first
///   request of a vehicle after an assignment change reads Fleet Engine's live location first;
///   fixes of a partition being revoked are not sent.
/// - **No silent drops**: every registered record ends finished, dead-lettered, or unfinished
///   and uncommitted; a history longer than the past-locations cap goes out in chunks, oldest first.
/// - **Bounded memory, no head-of-line blocking**: fetching pauses exactly for partitions holding
///   their share of the pending records; idle vehicles are forgotten.
///
/// Events that can only change the pause wish return it; the others return `PipelineActions`,
/// with what only that event causes beside it.
/// `Waiter` is whatever resumes a worker (a continuation in the relay, a number in tests).
/// Dead letters: `PipelineState+Letters.swift`.
public struct PipelineState<Waiter> {
    public typealias Limits = PipelineLimits
    public typealias Actions = PipelineActions<Waiter>

    public let limits: Limits
    private(set) var ledger: PartitionLedger
    private(set) var vehicles: VehicleScheduler
    var letters = LetterQueue()
    private(set) var pacing: Pacing
    private var timer = DeadlineTimer()
    private(set) var waiters = Deque<Waiter>()
    /// Letter writers waiting for a letter.
    var letterWriters = Deque<Waiter>()
    /// Advances with every assignment (the first is epoch 1): a vehicle's first request in a new
    /// epoch reads its live location.
    private var epoch: UInt64 = 0
    private(set) var intakeClosed = false
    /// No more records will come (`endInput`): what is queued goes out, then workers stop.
    private var inputEnded = false
    /// Records wait before they can be taken in (their schema cannot be fetched).
    private var recordsWaiting = false
    public private(set) var requestsInFlight = 0
    /// A `Moment`, like every time the state holds: see `StoredAsMoment`.
    private var nextSweep: Moment
    private var announcedVehiclesFailing = 0

    public init(limits: Limits, now: ContinuousClock.Instant) {
        self.limits = limits
        self.ledger = PartitionLedger(commitInterval: limits.commitInterval, maximumPendingRecords: limits.maximumPendingRecords,
                                      burstRecords: limits.burstRecords)
        self.vehicles = VehicleScheduler(pastLocations: limits.pastLocations, minimumInterval: limits.minimumInterval,
                                         holdsPartialRequests: limits.holdsPartialRequests)
        self.vehicles.keepsPlaceOnThrottle = limits.learnedRate != nil
        self.pacing = Pacing(concurrency: limits.concurrency, learnedRate: limits.learnedRate,
                             maximumRequestsPerSecond: limits.maximumRequestsPerSecond, now: now)
        self.nextSweep = Moment(now + limits.vehicleIdleLimit / 2)
    }

    // MARK: Partitions

    /// Partitions to take records of, under an assignment generation: a fresh pause wish.
    public mutating func assign(_ assigned: [TopicPartition], generation: UInt64) -> PauseChange? {
        ledger.assign(assigned, generation: generation)
        epoch += 1
        if !intakeClosed { ledger.updateEveryShare() }
        return ledger.pauseChange(always: true, recordsWait: recordsWaiting)
    }

    /// Stops new work on the partitions. Requests and dead letters under way are not
    /// cancelled but waited for (`workUnderWay`): a cancelled request may still be applied by
    /// Fleet Engine, later than the next owner's newer fix. What finished is then committed.
    public mutating func beginRevoke(_ revoking: [TopicPartition]) { ledger.beginRevoke(revoking) }

    /// A commit inside the revoke succeeded: the final commit then carries only what finished since.
    public mutating func committedDuringRevoke(_ offsets: [TopicPartitionOffset]) { ledger.committedDuringRevoke(offsets) }

    /// Forgets the partitions; returns their final commit offsets (those not yet committed) and
    /// the pause wish without them.
    public mutating func finishRevoke(_ revoked: [TopicPartition]) -> (offsets: [TopicPartitionOffset], pause: PauseChange?) {
        let offsets = ledger.finishRevoke(revoked)
        if !intakeClosed { ledger.updateEveryShare() }
        return (offsets, ledger.pauseChange(always: true, recordsWait: recordsWaiting))
    }

    // MARK: Records

    /// Takes consumed records in. Records of partitions not (or no longer) ours, or
    /// already registered, are skipped; bad ones are ordered dead-lettered at once.
    public mutating func consume(_ records: consuming [ConsumedRecord], now: ContinuousClock.Instant) -> (Actions, RecordsTakenIn) {
        var actions = Actions()
        var taken = RecordsTakenIn()
        guard !intakeClosed else { return (actions, taken) }
        let registeredAt = Moment(now)
        // Off the end of the reversed chunk, in order: each record moves into its lane, not copied (retained)
        // and released with the chunk; its source is registered where it lies (taken out, it would be copied).
        records.withUnsafeMutableBufferPointer { $0.reverse() }
        var perPartition = CountsByPartition()
        while let record = records.popLast() {
            switch consume record {
            case .fix(let fix):
                guard ledger.register(fix.source, at: registeredAt, counting: &perPartition) else { continue }
                if let due = vehicles.enqueue(fix, now: now, moment: registeredAt) { wakeTimer(for: due, &actions) }
            case .bad(let source, let reason, let detail):
                guard ledger.register(source, at: registeredAt, counting: &perPartition) else { continue }
                orderDeadLetter(source, of: nil, reason: .badRecord(reason), detail: detail, &actions)
            case .skipped(let source):
                guard ledger.register(source, at: registeredAt, counting: &perPartition) else { continue }
                finish(source, now: now, &actions)
                taken.skipped += 1
            }
        }
        taken.perPartition = perPartition.totals()
        for partition in taken.perPartition.keys { updateShare(partition) }
        updateHolding(now: now, &actions)
        serveWaiters(now: now, &actions)
        return (finished(actions), taken)
    }

    /// Records wait before they can be taken in (`waiting`: their schema cannot be fetched), or
    /// no longer do: fetching pauses for every partition meanwhile, since the reader takes in
    /// nothing more until they are, and resumes as the shares say once they were.
    public mutating func recordsWait(_ waiting: Bool) -> PauseChange? {
        guard waiting != recordsWaiting else { return nil }
        recordsWaiting = waiting
        updatePausingEveryPartition()
        return ledger.pauseChange(always: true, recordsWait: recordsWaiting)
    }

    /// Stops intake for good (shutdown): fetching pauses for every partition, now and after any
    /// later assignment; every queued fix is dropped, unsent and unfinished, so it stays
    /// uncommitted; workers are released once the requests under way ended.
    public mutating func closeIntake(now: ContinuousClock.Instant) -> Actions {
        intakeClosed = true
        updatePausingEveryPartition()
        vehicles.dropEverythingQueued()
        var actions = Actions()
        serveWaiters(now: now, &actions)
        return finished(actions, wishChanged: true)
    }

    /// No more records will come (a replay reached the end of its window): vehicles holding
    /// less than a full request are sent, and once nothing is queued, deferred or under way,
    /// the workers are released. Nothing is dropped.
    public mutating func endInput(now: ContinuousClock.Instant) -> Actions {
        inputEnded = true
        var actions = Actions()
        updateHolding(now: now, &actions)
        serveWaiters(now: now, &actions)
        return finished(actions)
    }

    // MARK: Workers

    /// A worker asks for its next request: it is resumed through the actions, now or later.
    public mutating func requestWork(_ waiter: Waiter, now: ContinuousClock.Instant) -> Actions {
        waiters.append(waiter)
        var actions = Actions()
        serveWaiters(now: now, &actions)
        return finished(actions)
    }

    /// An attempt ended. Accepted and stale requests finish their records; rejected ones
    /// order them dead-lettered; abandoned ones leave them unfinished for whoever owns their
    /// partition next. A transient failure puts the fixes back and makes the vehicle due after
    /// a full-jitter backoff (at least the server's `Retry-After`): the slot is free at once, and
    /// fixes arriving meanwhile join the next try. Past `retryDeadline` the records are
    /// dead-lettered instead. `random` draws the jitter (tests pass a fixed one). `next`, the
    /// worker that made the attempt, then asks for its next request as `requestWork` would.
    public mutating func complete(_ request: CoalescedRequest, _ delivery: Delivery, now: ContinuousClock.Instant,
                                  random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) },
                                  thenServe next: Waiter? = nil) -> (Actions, AttemptAftermath) {
        var actions = Actions()
        var aftermath = AttemptAftermath()
        if let startedAt = request.startedAt {
            let adaptation = pacing.attemptEnded(
                delivery, charged: request.requestsAtMost, startedAt: startedAt, underWay: requestsInFlight,
                mostVehiclesFailing: Pacing.mostFailing(vehicles.vehiclesFailing, of: vehicles.vehicleCount), now: now)
            aftermath.concurrencyLimit = adaptation.limit
            aftermath.overload = adaptation.overload
            aftermath.pacing = adaptation.pacing
            aftermath.learnedRate = adaptation.learnedRate
        }
        let vehicle = request.update.vehicle
        vehicles.learn(request, newestKnownMilliseconds: delivery.newestKnownMilliseconds)
        var failure: TransientFailure?
        switch delivery.outcome {
        case .accepted, .stale:
            if ledger.finish(request) { finished(in: request.partitions.lazy.map(\.topicPartition), now: now, &actions) }
        case .rejected(let refusal, let detail):
            for source in request.sources { orderDeadLetter(source, of: vehicle.id, reason: .refused(refusal), detail: detail, &actions) }
            aftermath.refusedRecords += request.sources.count
        case .abandoned:
            if !intakeClosed { vehicles.putBack(request, owns: ledger.ownership.owns) }
        case .retry(let transient):
            failure = transient
            retry(request, after: transient, readInEpoch: delivery.liveChecked ? request.liveCheckEpoch : nil, now: now,
                  random: random, &actions, &aftermath)
        }
        if failure == nil {
            vehicles.answered(request, checkedEpoch: delivery.liveChecked ? request.liveCheckEpoch : nil, now: now)
        }
        endRequest(request, now: now, &actions)
        aftermath.outage = pacing.updateOutage(failing: vehicles.vehiclesFailing, vehicles: vehicles.vehicleCount,
                                               failure: failure, now: now)
        updateHolding(now: now, &actions)
        if let next {
            waiters.append(next)
            serveWaiters(now: now, &actions)
        }
        return (finished(actions), aftermath)
    }

    /// A transient failure, as the vehicle scheduler decides it: retried after its backoff, or
    /// past the retry deadline dead-lettered. A try that found no token sent nothing: it starts
    /// no minimum interval, and the live location read in a failed try is read again before
    /// the next (a newer fix may reach Fleet Engine meanwhile, from a replay or another owner).
    private mutating func retry(_ request: CoalescedRequest, after failure: TransientFailure, readInEpoch: UInt64?,
                                now: ContinuousClock.Instant,
                                random: (ClosedRange<Double>) -> Double, _ actions: inout Actions,
                                _ aftermath: inout AttemptAftermath) {
        switch vehicles.failed(request, failure, readInEpoch: readInEpoch, policy: limits.retryPolicy, deadline: limits.retryDeadline,
                               keepsFixes: !intakeClosed, owns: ledger.ownership.owns, now: now, random: random) {
        case .retrying(let due):
            if let due { wakeTimer(for: due, &actions) }
        case .gaveUp(let detail):
            for source in request.sources {
                orderDeadLetter(source, of: request.update.vehicle.id, reason: .retryDeadlineExceeded, detail: detail, &actions)
            }
            aftermath.refusedRecords += request.sources.count
            aftermath.retriesExhausted = detail
        case .dropped:
            break
        }
    }

    private mutating func endRequest(_ request: CoalescedRequest, now: ContinuousClock.Instant, _ actions: inout Actions) {
        requestsInFlight -= 1
        endWork(on: request.partitions, &actions)
        if let due = vehicles.requestEnded(request, now: now) { wakeTimer(for: due, &actions) }
        serveWaiters(now: now, &actions)
    }

    /// No request will come any more: intake closed and nothing is under way, or the input
    /// ended and nothing is queued, deferred or under way; and no dead letter is outstanding.
    var isDrained: Bool {
        requestsInFlight == 0 && letters.isSettled && (intakeClosed || (inputEnded && vehicles.nothingScheduled))
    }

    mutating func serveWaiters(now: ContinuousClock.Instant, _ actions: inout Actions) {
        let servable = min(waiters.count, vehicles.readyVehicles)
        while !waiters.isEmpty {
            if !intakeClosed {
                if !pacing.hasRoom(underWay: requestsInFlight) { return }
                // A ready vehicle waits for the request budget's next token: a deadline, not a sleeping worker.
                if vehicles.hasReadyVehicles, let due = pacing.waitForToken(now: now) {
                    wakeTimer(for: due, &actions)
                    return
                }
            }
            pacing.stopWaitingForBudget()
            if var request = takeReadyRequest(now: now, &actions) {
                request.startedAt = now
                pacing.spend(requests: request.requestsAtMost, now: now)
                actions.resume(waiters.removeFirst(), with: request, ofAtMost: servable)
            } else if isDrained {
                actions.resume += waiters.map { ($0, nil) }
                waiters = []
            } else {
                return
            }
        }
    }

    /// The next request from the ready queue; fixes not newer than what Fleet Engine holds finish as stale.
    private mutating func takeReadyRequest(now: ContinuousClock.Instant, _ actions: inout Actions) -> CoalescedRequest? {
        let (request, stale) = vehicles.takeReady(epoch: epoch, readsLiveLocationEveryTime: limits.readsLiveLocationBeforeEveryRequest,
                                                  owns: ledger.ownership.owns)
        for fix in stale { finish(fix.source, now: now, &actions) }
        actions.staleFixes += stale.count
        guard var request else { return nil }
        requestsInFlight += 1
        request.revocations = ledger.beginWork(on: request.partitions)
        return request
    }

    // MARK: Offsets and flow control

    mutating func finish(_ source: RecordSource, now: ContinuousClock.Instant, _ actions: inout Actions) {
        if ledger.finish(source) { finished(in: CollectionOfOne(source.topicPartition), now: now, &actions) }
    }

    /// Records finished (a request's together): each partition's share is checked and the commit
    /// scheduled once for all of them, not once per record (a backlog's request carries a hundred).
    private mutating func finished(in partitions: some Sequence<TopicPartition>, now: ContinuousClock.Instant, _ actions: inout Actions) {
        for partition in partitions { updateShare(partition) }
        if let due = ledger.scheduleCommit(now: now) { wakeTimer(for: due, &actions) }
    }

    mutating func beginWork(on source: RecordSource) {
        ledger.beginWork(on: ShortList(PartitionGeneration(source.topicPartition, source.generation)))
    }

    mutating func endWork(on sites: ShortList<PartitionGeneration>, _ actions: inout Actions) {
        if ledger.endWork(on: sites) { actions.workFinished = true }
    }

    /// Every partition is paused while records wait to be taken in, and for good once intake closed.
    private mutating func updatePausingEveryPartition() {
        ledger.pausesEveryPartition = recordsWaiting || intakeClosed
    }

    /// A partition's share checked again; after shutdown began the shares no longer change.
    private mutating func updateShare(_ partition: TopicPartition) {
        if !intakeClosed { ledger.updateShare(partition) }
    }

    /// Holding for full requests follows fetching (see `VehicleScheduler.updateHolding`).
    private mutating func updateHolding(now: ContinuousClock.Instant, _ actions: inout Actions) {
        guard limits.holdsPartialRequests,
              let released = vehicles.updateHolding(fetchingPaused: ledger.anyPartitionAtItsShare, requestsUnderWay: requestsInFlight,
                                                    inputEnded: inputEnded, now: now) else { return }
        if let due = released { wakeTimer(for: due, &actions) }
        serveWaiters(now: now, &actions)
    }

    // MARK: Deadlines

    /// The next moment something is due: a deferred vehicle, a letter, the budget, a commit,
    /// or forgetting idle vehicles. The sweep is always due at some point, so a sleeping timer
    /// never misses the first vehicle.
    public var nextDeadline: ContinuousClock.Instant {
        [vehicles.nextDue, letters.nextDue, pacing.budgetDue, ledger.nextDeadline].compactMap { $0 }.reduce(nextSweep.instant, min)
    }

    /// The timer goes to sleep until the returned deadline, or until an event wakes it.
    public mutating func timerWillSleep() -> ContinuousClock.Instant {
        timer.sleep(until: nextDeadline)
    }

    /// Wakes a timer sleeping past `due`.
    mutating func wakeTimer(for due: ContinuousClock.Instant, _ actions: inout Actions) {
        if timer.mustWake(for: due) { actions.wakeTimer = true }
    }

    /// The timer woke: vehicles whose time came are scheduled, idle vehicles forgotten, letters
    /// ordered again, a commit ordered. `issueCommit` hands the order to Kafka within this turn
    /// (see `Pipeline.deadlineReached`); a refusal it returns is the commit's answer at once.
    public mutating func deadlineReached(now: ContinuousClock.Instant,
                                         issueCommit: (CommitOrder) -> String? = { _ in nil }) -> (Actions, CommitDeadline) {
        timer.woke()
        pacing.deadlineReached(now: now)
        var actions = Actions()
        if let due = vehicles.releaseDue(now: now) { wakeTimer(for: due, &actions) }
        if now >= nextSweep.instant {
            nextSweep = Moment(now + limits.vehicleIdleLimit / 2)
            vehicles.forgetIdleVehicles(idleFor: limits.vehicleIdleLimit, now: now)
        }
        orderDueLetters(now: now, &actions)
        var (order, failure) = ledger.commitIfDue(now: now)
        if let order, let refusal = issueCommit(order) {
            if let due = ledger.commitAnswered(order, failure: refusal, now: now) { wakeTimer(for: due, &actions) }
            failure = refusal
        }
        serveWaiters(now: now, &actions)
        updateHolding(now: now, &actions)
        return (finished(actions), CommitDeadline(order: order, failure: failure))
    }

    /// The broker answered a commit (`failure` nil: committed); see `PartitionLedger.commitAnswered`.
    public mutating func commitAnswered(_ order: CommitOrder, failure: String?, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        if let due = ledger.commitAnswered(order, failure: failure, now: now) { wakeTimer(for: due, &actions) }
        return finished(actions)
    }

    /// Completes an event's actions: letter writers take the letters ready, a drained burst and
    /// a changed count of failing vehicles are reported, and the pause wish is handed out when a
    /// share flipped it (or `wishChanged`: what pauses every partition changed).
    mutating func finished(_ actions: Actions, wishChanged: Bool = false) -> Actions {
        var actions = actions
        serveLetterWriters(&actions)
        // A burst begins at `burstRecords` unfinished records and has drained once a tenth of
        // that is left: reported once, so that the memory it took can go back to the system.
        if ledger.burstDrained() { actions.burstDrained = true }
        if vehicles.vehiclesFailing != announcedVehiclesFailing {
            announcedVehiclesFailing = vehicles.vehiclesFailing
            actions.vehiclesFailing = announcedVehiclesFailing
        }
        actions.pause = ledger.pauseChange(always: wishChanged, recordsWait: recordsWaiting)
        return actions
    }
}
