import DequeModule
import FleetAuth
import Kafka

/// The relay's core as one value: events in, actions out, no threads, no clock of its own.
///
/// It routes each event to the parts that own its state: the partition ledger (offsets,
/// generations, revokes, shares and the pause wish, commits), the vehicle scheduler (lanes,
/// ready and deferred vehicles, coalescing, holding), the letter queue (dead letters ordered
/// and due again) and the pacing (the concurrency limit, the request budget, outages); it
/// keeps the workers waiting for a request and the timer. The guarantees follow from the parts:
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
/// `Waiter` is whatever resumes a worker (a continuation in the relay, a number in tests).
public struct PipelineState<Waiter> {
    public typealias Limits = PipelineLimits
    public typealias Actions = PipelineActions<Waiter>

    public let limits: Limits
    private(set) var ledger: PartitionLedger
    private(set) var vehicles: VehicleScheduler
    private var letters = LetterQueue()
    private(set) var pacing: Pacing
    private(set) var waiters = Deque<Waiter>()
    /// Letter writers waiting for a letter.
    private(set) var letterWriters = Deque<Waiter>()
    /// Advances with every assignment (the first is epoch 1): a vehicle's first request in a new
    /// epoch reads its live location.
    private var epoch: UInt64 = 0
    private var intakeClosed = false
    /// No more records will come (`endInput`): what is queued goes out, then workers stop.
    private var inputEnded = false
    /// Records wait before they can be taken in (their schema cannot be fetched).
    private var recordsWaiting = false
    public private(set) var requestsInFlight = 0
    private var nextSweep: ContinuousClock.Instant
    /// What the timer sleeps until, while it sleeps.
    private var timerDeadline: ContinuousClock.Instant
    private var timerSleeping = false
    private var announcedVehiclesFailing = 0

    public init(limits: Limits, now: ContinuousClock.Instant) {
        self.limits = limits
        self.ledger = PartitionLedger(commitInterval: limits.commitInterval, maximumPendingRecords: limits.maximumPendingRecords)
        self.vehicles = VehicleScheduler(pastLocations: limits.pastLocations, minimumInterval: limits.minimumInterval,
                                         holdsPartialRequests: limits.holdsPartialRequests)
        self.pacing = Pacing(concurrency: limits.concurrency, maximumRequestsPerSecond: limits.maximumRequestsPerSecond, now: now)
        self.nextSweep = now + limits.vehicleIdleLimit / 2
        self.timerDeadline = nextSweep
    }

    // MARK: Partitions

    public mutating func assign(_ assigned: [TopicPartition], generation: UInt64) -> Actions {
        ledger.assign(assigned, generation: generation)
        epoch += 1
        var actions = Actions()
        updateEveryShare(&actions)
        return finished(actions, wishChanged: true)
    }

    /// Stops new work on the partitions. Requests and dead letters under way are not
    /// cancelled but waited for (`workUnderWay`): a cancelled request may still be applied by
    /// Fleet Engine, later than the next owner's newer fix. What finished is then committed.
    public mutating func beginRevoke(_ revoking: [TopicPartition]) {
        ledger.beginRevoke(revoking)
    }

    /// What finished on partitions being revoked, to commit before the revoke waits for the
    /// work under way: a member dropped from the group while it waits cannot commit any more.
    public func offsetsToCommit(revoking revoked: [TopicPartition]) -> [TopicPartitionOffset] {
        ledger.offsetsToCommit(revoking: revoked)
    }

    /// A commit inside the revoke succeeded: the final commit then carries only what finished since.
    public mutating func committedDuringRevoke(_ offsets: [TopicPartitionOffset]) {
        ledger.committedDuringRevoke(offsets)
    }

    public func workUnderWay(in partitions: [TopicPartition]) -> Int {
        ledger.workUnderWay(in: partitions)
    }

    /// Forgets the partitions; returns their final commit offsets (those not yet committed).
    public mutating func finishRevoke(_ revoked: [TopicPartition]) -> (offsets: [TopicPartitionOffset], actions: Actions) {
        let offsets = ledger.finishRevoke(revoked)
        var actions = Actions()
        updateEveryShare(&actions)
        return (offsets, finished(actions, wishChanged: true))
    }

    /// Whether work on the record should go on: its partition is assigned under the same
    /// generation and not being revoked.
    public func owns(_ source: RecordSource) -> Bool { ledger.owns(source) }

    // MARK: Records

    /// Takes consumed records in. Records of partitions not (or no longer) ours, or
    /// already registered, are skipped; bad ones are ordered dead-lettered at once.
    public mutating func consume(_ records: [ConsumedRecord], now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        guard !intakeClosed else { return actions }
        for record in records {
            let source = record.source
            guard ledger.register(source, now: now) else { continue }
            actions.registered[source.topicPartition, default: 0] += 1
            switch record {
            case .fix(let fix):
                if let due = vehicles.enqueue(fix, now: now) { wakeTimer(for: due, &actions) }
            case .bad(let source, let reason, let detail):
                orderDeadLetter(source, reason: reason, detail: detail, &actions)
            case .skipped(let source):
                finish(source, now: now, &actions)
                actions.skippedRecords += 1
            }
        }
        for partition in actions.registered.keys { updateShare(partition, &actions) }
        updateHolding(now: now, &actions)
        serveWaiters(now: now, &actions)
        return finished(actions)
    }

    /// Records wait before they can be taken in (`waiting`: their schema cannot be fetched), or
    /// no longer do: fetching pauses for every partition meanwhile, since the reader takes in
    /// nothing more until they are, and resumes as the shares say once they were.
    public mutating func recordsWait(_ waiting: Bool) -> Actions {
        guard waiting != recordsWaiting else { return Actions() }
        recordsWaiting = waiting
        ledger.pausesEveryPartition = recordsWaiting || intakeClosed
        return finished(Actions(), wishChanged: true)
    }

    /// Stops intake for good (shutdown): fetching pauses for every partition, now and after any
    /// later assignment; every queued fix is dropped, unsent and unfinished, so it stays
    /// uncommitted; workers are released once the requests under way ended.
    public mutating func closeIntake(now: ContinuousClock.Instant) -> Actions {
        intakeClosed = true
        ledger.pausesEveryPartition = true
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

    // MARK: Dead letters

    /// A dead letter was acknowledged: its record is finished.
    public mutating func deadLetterWritten(_ source: RecordSource, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        finish(source, now: now, &actions)
        endWork(on: [PartitionGeneration(source.topicPartition, source.generation)], &actions)
        letterEnded(now: now, &actions)
        return finished(actions)
    }

    /// A dead letter was not written: it is ordered again after a capped, jittered backoff, as a
    /// deadline of its own (the writer holds no slot meanwhile), while its partition is still
    /// this member's and not being revoked. Otherwise it is dropped: the partition's next owner
    /// reads its record again. Its record stays unfinished, and so uncommitted, until written.
    public mutating func deadLetterFailed(_ order: DeadLetterOrder, now: ContinuousClock.Instant,
                                          random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) -> Actions {
        var actions = Actions()
        let backoff = limits.retryPolicy.delay(attempt: order.failedWrites, retryAfterSeconds: nil, random: random)
        if owns(order.source), let due = letters.failed(order, backoff: backoff, now: now) {
            wakeTimer(for: due, &actions)
        } else {
            dropLetter(order, now: now, &actions)
        }
        return finished(actions)
    }

    /// Shutdown ran out of time: every letter still outstanding stays unwritten (its record
    /// uncommitted), none is ordered again, and the workers no longer wait for them.
    public mutating func giveUpDeadLetters(now: ContinuousClock.Instant) -> Actions {
        letters.giveUp()
        var actions = Actions()
        serveWaiters(now: now, &actions)
        return finished(actions)
    }

    // MARK: Workers

    /// A letter writer asks for its next letter: it is resumed through the actions, now or
    /// later, with nil once no letter will come any more.
    public mutating func requestLetter(_ writer: Waiter, now: ContinuousClock.Instant) -> Actions {
        letterWriters.append(writer)
        return finished(Actions())
    }

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
    /// dead-lettered instead. `random` draws the jitter (tests pass a fixed one).
    public mutating func complete(_ request: CoalescedRequest, _ delivery: Delivery, now: ContinuousClock.Instant,
                                  random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) -> Actions {
        var actions = Actions()
        if let startedAt = request.startedAt {
            let adaptation = pacing.attemptEnded(
                delivery.outcome, latency: delivery.fleetEngineLatency, startedAt: startedAt, underWay: requestsInFlight,
                mostVehiclesFailing: Pacing.mostFailing(vehicles.vehiclesFailing, of: vehicles.vehicleCount), now: now)
            actions.concurrencyLimit = adaptation.limit
            actions.throttling = adaptation.throttling
        }
        let vehicle = request.update.vehicle
        vehicles.learn(vehicle, newestKnownMilliseconds: delivery.newestKnownMilliseconds)
        switch delivery.outcome {
        case .accepted, .stale:
            for source in request.sources { finish(source, now: now, &actions) }
        case .rejected(let reason, let detail):
            for source in request.sources { orderDeadLetter(source, reason: reason, detail: detail, &actions) }
            actions.refusedRecords += request.sources.count
        case .abandoned:
            if !intakeClosed { vehicles.putBack(request, owns: ledger.owns) }
        case .retry(let failure):
            retry(request, after: failure, now: now, random: random, &actions)
            if actions.retriesExhausted != nil { actions.refusedRecords += request.sources.count }
            updateOutage(failure, now: now, &actions)
            endRequest(request, now: now, &actions)
            updateHolding(now: now, &actions)
            return finished(actions)
        }
        vehicles.answered(vehicle, checkedEpoch: delivery.liveChecked ? request.liveCheckEpoch : nil, now: now)
        endRequest(request, now: now, &actions)
        updateOutage(nil, now: now, &actions)
        updateHolding(now: now, &actions)
        return finished(actions)
    }

    /// Fleet Engine began or stopped failing for most vehicles held (see `Pacing.updateOutage`).
    private mutating func updateOutage(_ failure: TransientFailure?, now: ContinuousClock.Instant, _ actions: inout Actions) {
        if let change = pacing.updateOutage(failing: vehicles.vehiclesFailing, vehicles: vehicles.vehicleCount,
                                            failure: failure, now: now) {
            actions.outage = change
        }
    }

    /// A transient failure: the fixes go back to the front of the vehicle's queue and the
    /// vehicle is due after its backoff, or past the retry deadline its records are
    /// dead-lettered. A try that found no token sent nothing: it starts no minimum interval,
    /// and the live location read in a failed try is read again before the next (a newer fix
    /// may reach Fleet Engine meanwhile, from a replay or another owner).
    private mutating func retry(_ request: CoalescedRequest, after failure: TransientFailure, now: ContinuousClock.Instant,
                                random: (ClosedRange<Double>) -> Double, _ actions: inout Actions) {
        let vehicle = request.update.vehicle
        let failingSince = request.failingSince ?? now
        if let deadline = limits.retryDeadline, now - failingSince >= deadline {
            let detail = "Gave up after \(request.retryAttempts + 1) attempts in \(Int((now - failingSince).inSeconds.rounded())) s; last cause: \(failure.cause): \(failure.detail)"
            for source in request.sources {
                orderDeadLetter(source, reason: UpdateForwarder.retryDeadlineExceeded, detail: detail, &actions)
            }
            actions.retriesExhausted = detail
            vehicles.gaveUp(vehicle, fleetEngineFailed: failure.isFleetEngine, now: now)
        } else if !intakeClosed, vehicles.putBack(request, owns: ledger.owns) {
            let backoff = limits.retryPolicy.delay(attempt: request.retryAttempts, retryAfterSeconds: failure.retryAfterSeconds,
                                                   random: random)
            let state = VehicleLane.Retry(attempts: request.retryAttempts + 1, since: failingSince, fleetEngine: failure.isFleetEngine)
            if let due = vehicles.retry(vehicle, state, backoff: backoff, now: now) { wakeTimer(for: due, &actions) }
        } else {
            vehicles.gaveUp(vehicle, fleetEngineFailed: failure.isFleetEngine, now: now)  // nothing of it is ours any more
        }
    }

    private mutating func endRequest(_ request: CoalescedRequest, now: ContinuousClock.Instant, _ actions: inout Actions) {
        requestsInFlight -= 1
        endWork(on: request.partitions, &actions)
        if let due = vehicles.requestEnded(request.update.vehicle, now: now) { wakeTimer(for: due, &actions) }
        serveWaiters(now: now, &actions)
    }

    /// No request will come any more: intake closed and nothing is under way, or the input
    /// ended and nothing is queued, deferred or under way; and no dead letter is outstanding
    /// (the workers' end is what ends the dead-letter writer).
    private var isDrained: Bool {
        requestsInFlight == 0 && letters.isSettled && (intakeClosed || (inputEnded && vehicles.nothingScheduled))
    }

    private mutating func serveWaiters(now: ContinuousClock.Instant, _ actions: inout Actions) {
        while !waiters.isEmpty {
            if !intakeClosed {
                if !pacing.hasRoom(underWay: requestsInFlight) { return }
                // A ready vehicle waits for the request budget's next token: a deadline, not a sleeping worker.
                if vehicles.hasReadyVehicles, let due = pacing.takeBudget(now: now) {
                    wakeTimer(for: due, &actions)
                    return
                }
            }
            pacing.stopWaitingForBudget()
            if var request = takeReadyRequest(now: now, &actions) {
                request.startedAt = now
                actions.resume.append((waiters.removeFirst(), request))
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
                                                  owns: ledger.owns)
        for fix in stale { finish(fix.source, now: now, &actions) }
        actions.staleFixes += stale.count
        guard var request else { return nil }
        requestsInFlight += 1
        request.revocations = ledger.beginWork(on: request.partitions)
        return request
    }

    // MARK: Offsets and flow control

    private mutating func finish(_ source: RecordSource, now: ContinuousClock.Instant, _ actions: inout Actions) {
        guard ledger.finish(source) else { return }
        updateShare(source.topicPartition, &actions)
        if let due = ledger.scheduleCommit(now: now) { wakeTimer(for: due, &actions) }
    }

    /// A letter writer will take it; without a dead-letter topic it stays unfinished instead.
    private mutating func orderDeadLetter(_ source: RecordSource, reason: String, detail: String, _ actions: inout Actions) {
        let letter = DeadLetterOrder(source: source, reason: reason, detail: detail)
        guard limits.writesDeadLetters else {
            actions.lettersNotWritten.append(letter)
            return
        }
        ledger.beginWork(on: [PartitionGeneration(source.topicPartition, source.generation)])
        letters.order(letter)
    }

    /// Letter writers take the ready letters; once no request and no letter will come any
    /// more, they are released.
    private mutating func serveLetterWriters(_ actions: inout Actions) {
        while !letterWriters.isEmpty {
            if let letter = letters.takeReady() {
                actions.resumeLetters.append((letterWriters.removeFirst(), letter))
            } else if isDrained {
                actions.resumeLetters += letterWriters.map { ($0, nil) }
                letterWriters = []
            } else {
                return
            }
        }
    }

    private mutating func letterEnded(now: ContinuousClock.Instant, _ actions: inout Actions) {
        if letters.ended() { serveWaiters(now: now, &actions) }
    }

    /// A letter of a partition revoked or revoking: its work there ends, so that a revoke does
    /// not wait for a topic that refuses letters.
    private mutating func dropLetter(_ order: DeadLetterOrder, now: ContinuousClock.Instant, _ actions: inout Actions) {
        endWork(on: [PartitionGeneration(order.source.topicPartition, order.source.generation)], &actions)
        letterEnded(now: now, &actions)
    }

    private mutating func endWork(on sites: [PartitionGeneration], _ actions: inout Actions) {
        if ledger.endWork(on: sites) { actions.workFinished = true }
    }

    /// A partition's share checked again; after shutdown began the shares no longer change.
    private mutating func updateShare(_ partition: TopicPartition, _ actions: inout Actions) {
        guard !intakeClosed, let paused = ledger.updateShare(partition) else { return }
        if paused { actions.pausing.append(partition) } else { actions.resuming.append(partition) }
    }

    private mutating func updateEveryShare(_ actions: inout Actions) {
        guard !intakeClosed else { return }
        for (partition, paused) in ledger.updateEveryShare() {
            if paused { actions.pausing.append(partition) } else { actions.resuming.append(partition) }
        }
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
        [vehicles.nextDue, letters.nextDue, pacing.budgetDue, ledger.nextDeadline].compactMap { $0 }.reduce(nextSweep, min)
    }

    /// The timer goes to sleep until the returned deadline, or until an event wakes it.
    public mutating func timerWillSleep() -> ContinuousClock.Instant {
        timerSleeping = true
        timerDeadline = nextDeadline
        return timerDeadline
    }

    /// Wakes a timer sleeping past `due`.
    private mutating func wakeTimer(for due: ContinuousClock.Instant, _ actions: inout Actions) {
        if timerSleeping, due < timerDeadline {
            timerDeadline = due
            actions.wakeTimer = true
        }
    }

    /// The timer woke: vehicles whose time came are scheduled, idle vehicles forgotten, letters
    /// ordered again, a commit ordered.
    public mutating func deadlineReached(now: ContinuousClock.Instant) -> Actions {
        timerSleeping = false
        pacing.deadlineReached(now: now)
        var actions = Actions()
        if let due = vehicles.releaseDue(now: now) { wakeTimer(for: due, &actions) }
        if now >= nextSweep {
            nextSweep = now + limits.vehicleIdleLimit / 2
            vehicles.forgetIdleVehicles(idleFor: limits.vehicleIdleLimit, now: now)
        }
        orderDueLetters(now: now, &actions)
        let (order, failure) = ledger.commitIfDue(now: now)
        actions.commit = order
        if let failure { actions.commitFailure = failure }
        serveWaiters(now: now, &actions)
        updateHolding(now: now, &actions)
        return finished(actions)
    }

    /// Letters whose backoff ended are ordered again; those of partitions no longer ours are dropped.
    private mutating func orderDueLetters(now: ContinuousClock.Instant, _ actions: inout Actions) {
        for order in letters.takeDue(now: now) {
            if owns(order.source) {
                letters.orderAgain(order)
            } else {
                dropLetter(order, now: now, &actions)
            }
        }
    }

    // MARK: Commits

    /// Offsets that advanced since the last commit, by partition.
    public func offsetsToCommit() -> [TopicPartitionOffset] { ledger.offsetsToCommit() }

    /// The broker answered a commit (`failure` nil: committed); see `PartitionLedger.commitAnswered`.
    public mutating func commitAnswered(_ order: CommitOrder, failure: String?, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        if let due = ledger.commitAnswered(order, failure: failure, now: now) { wakeTimer(for: due, &actions) }
        if let failure { actions.commitFailure = failure } else { actions.committed = true }
        return finished(actions)
    }

    /// Completes an event's actions with the pause wish, when it differs from the last one
    /// handed out. After an assignment change (or a change of what pauses every partition) it
    /// is handed out even when no partition flipped, so that a revoked partition's pause never
    /// lingers in the consumer's wish.
    private mutating func finished(_ actions: Actions, wishChanged: Bool = false) -> Actions {
        var actions = actions
        serveLetterWriters(&actions)
        noteBurst(&actions)
        if vehicles.vehiclesFailing != announcedVehiclesFailing {
            announcedVehiclesFailing = vehicles.vehiclesFailing
            actions.vehiclesFailing = announcedVehiclesFailing
        }
        guard wishChanged || !actions.pausing.isEmpty || !actions.resuming.isEmpty,
              let (wish, sequence) = ledger.announceWish(always: wishChanged) else { return actions }
        actions.pause = PauseChange(wish: wish, sequence: sequence, pausing: actions.pausing.filter(wish.contains).sorted(),
                                    resuming: actions.resuming.filter { !wish.contains($0) }.sorted(), share: ledger.share,
                                    recordsWait: recordsWaiting)
        return actions
    }

    /// A burst begins at `burstRecords` unfinished records and has drained once a tenth of
    /// that is left: reported once, so that the memory it took can go back to the system.
    private mutating func noteBurst(_ actions: inout Actions) {
        if ledger.burstDrained(burstRecords: limits.burstRecords) { actions.burstDrained = true }
    }
}
