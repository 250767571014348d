import DequeModule
import FleetAuth
import HeapModule
import InputFormats
import Kafka
import OrderedCollections

/// A consumed record as the pipeline takes it: a decoded fix, or a record to dead-letter.
public enum ConsumedRecord: Sendable {
    case fix(PendingFix)
    case bad(RecordSource, reason: String, detail: String)
    /// Left out by the input mapping: finished as it is taken in.
    case skipped(RecordSource)

    var source: RecordSource {
        switch self {
        case .fix(let fix): fix.source
        case .bad(let source, _, _): source
        case .skipped(let source): source
        }
    }
}

/// A record to write to the dead-letter topic; `PipelineState.deadLetterWritten` finishes it,
/// `deadLetterFailed` orders it again after a backoff.
public struct DeadLetterOrder: Sendable {
    public let source: RecordSource
    public let reason: String
    public let detail: String
    /// Writes of this letter that failed so far: its next backoff.
    public internal(set) var failedWrites = 0

    public init(source: RecordSource, reason: String, detail: String) {
        self.source = source
        self.reason = reason
        self.detail = detail
    }
}

/// Offsets to commit, ordered by the state machine at its commit deadline; the broker's answer
/// goes back through `PipelineState.commitAnswered`. Each offset carries the assignment
/// generation of its partition when ordered: an answer applies only to a partition still
/// assigned under that generation.
public struct CommitOrder: Sendable, Equatable {
    public let id: UInt64
    public let offsets: [TopicPartitionOffset]
    let generations: [TopicPartition: UInt64]
}

/// A change of the partitions whose fetching is to be paused.
public struct PauseChange: Sendable, Equatable {
    /// Every partition to keep paused now.
    public var wish: Set<TopicPartition>
    /// Grows with every wish the state hands out: wishes leave the lock and may reach the record
    /// source out of order, so the source applies one only when it is newer than the last it applied.
    public var sequence: UInt64
    public var pausing: [TopicPartition]
    public var resuming: [TopicPartition]
    /// Unfinished records per partition at which fetching pauses.
    public var share: Int
    /// Every partition is paused because records wait to be taken in (the Schema Registry
    /// cannot be asked): none is over its share.
    public var recordsWait: Bool
}

/// The bounds and pacing `PipelineState` works within.
public struct PipelineLimits: Sendable {
    public static let defaultVehicleIdleLimit = Duration.seconds(300)
    public static let defaultMaximumPendingRecords = 50_000
    public static let defaultCommitInterval = Duration.seconds(1)
    /// A commit without an answer this long after it was ordered counts as failed.
    public static let commitAnswerLimit = Duration.seconds(10)

    public var pastLocations: Int
    public var minimumInterval: Duration
    public var vehicleIdleLimit: Duration
    public var maximumPendingRecords: Int
    /// The backoff of a vehicle whose attempt failed transiently.
    public var retryPolicy: RetryPolicy
    /// How long a vehicle's attempts may keep failing before its records are dead-lettered;
    /// nil: for as long as the process runs.
    public var retryDeadline: Duration?
    /// Time between commits: finished offsets are committed at most this often.
    public var commitInterval: Duration
    /// A vehicle waits until it has a full request's worth of fixes (`pastLocations` + 1)
    /// before it is sent, until the input ends or flow control pauses fetching: a replay's
    /// history goes out in as few requests as it fits in.
    public var holdsPartialRequests = false
    /// Fleet Engine's live location is read before every request, not only a vehicle's first
    /// after an assignment: a replay runs beside a live relay that moves vehicles on meanwhile.
    public var readsLiveLocationBeforeEveryRequest = false
    /// Attempts under way at most, adapted to what Fleet Engine sustains; nil: as many as workers ask.
    public var concurrency: ConcurrencyLimit.Settings?
    /// Attempts started per second at most; nil: no ceiling.
    public var maximumRequestsPerSecond: Double?

    /// Unfinished records from which the pipeline counts a burst: a fifth of the bound, at
    /// least 1,000. The warm steady state holds far fewer (the records of a fetch round).
    public var burstRecords: Int { max(1_000, maximumPendingRecords / 5) }

    public init(pastLocations: Int = Coalescer.defaultPastLimit, minimumInterval: Duration = .zero,
                vehicleIdleLimit: Duration = defaultVehicleIdleLimit,
                maximumPendingRecords: Int = defaultMaximumPendingRecords,
                retryPolicy: RetryPolicy = RetryPolicy(), retryDeadline: Duration? = nil,
                commitInterval: Duration = defaultCommitInterval) {
        self.commitInterval = commitInterval
        self.pastLocations = pastLocations
        self.minimumInterval = minimumInterval
        self.vehicleIdleLimit = vehicleIdleLimit
        self.maximumPendingRecords = maximumPendingRecords
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
    }
}

/// Fleet Engine failing for most of the vehicles the relay holds (an outage), rather than
/// refusing a few of them: it begins when more than half of them are waiting to retry after a
/// Fleet Engine failure, and ends once at most a third are.
public enum FleetEngineOutageChange: Sendable, Equatable {
    case began(failingVehicles: Int, vehicles: Int, failure: TransientFailure)
    case ended(lasted: Duration)
}

/// What the owner of the state must do after an event, outside the lock.
public struct PipelineActions<Waiter> {
    /// Workers to resume with their next request (nil: no more work, stop).
    public var resume: [(waiter: Waiter, request: CoalescedRequest?)] = []
    public var deadLetters: [DeadLetterOrder] = []
    public var pause: PauseChange?
    /// A deadline earlier than the one the timer sleeps until was set.
    public var wakeTimer = false
    /// Work under way on some partition finished: a revoke waiting for it may go on.
    public var workFinished = false
    /// Fixes finished unsent because Fleet Engine holds one at least as new.
    public var staleFixes = 0
    /// Records finished as taken in: the input mapping skipped them.
    public var skippedRecords = 0
    /// Records taken in, per partition.
    public var registered: [TopicPartition: Int] = [:]
    /// Fleet Engine's failures began or stopped holding back most vehicles.
    public var outage: FleetEngineOutageChange?
    /// Vehicles waiting to retry after a Fleet Engine failure, when the count changed.
    public var vehiclesFailing: Int?
    /// Offsets to commit now (the commit interval came round and something finished).
    public var commit: CommitOrder?
    /// A commit succeeded.
    public var committed = false
    /// The adaptive concurrency limit, when it changed.
    public var concurrencyLimit: Int?
    /// Fleet Engine began or stopped throttling the project.
    public var throttling: ConcurrencyLimit.Change?
    /// A burst of unfinished records (a cold start, a backlog) has drained: what it allocated
    /// is free, and the allocator may hand it back to the system.
    public var burstDrained = false
    /// Why a commit failed (refused, or no answer in time); it is ordered again.
    public var commitFailure: String?
    fileprivate var pausing: [TopicPartition] = []
    fileprivate var resuming: [TopicPartition] = []
}

/// The relay's core as one value: events in, actions out, no threads, no clock of its own.
///
/// It owns, per assigned partition, the unfinished offsets, generation, pause wish,
/// revoke state and work under way; per vehicle, the fixes waiting, whether a request
/// is in flight, the newest location Fleet Engine is known to hold and when the vehicle
/// is due; and the workers waiting for a request. The guarantees follow from it:
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

    private struct DueVehicle: Comparable {
        let due: ContinuousClock.Instant
        let vehicle: VehicleIdentity

        static func < (lhs: DueVehicle, rhs: DueVehicle) -> Bool { lhs.due < rhs.due }
        static func == (lhs: DueVehicle, rhs: DueVehicle) -> Bool { lhs.due == rhs.due && lhs.vehicle == rhs.vehicle }
    }

    public let limits: Limits
    private var partitions: [TopicPartition: PartitionProgress] = [:]
    /// Lanes stored densely, beside a compact hash table of their positions: a `Dictionary`
    /// keeps every key and lane in its buckets, most of them empty (at 100,000 vehicles 262,144
    /// buckets of 96 bytes). A lane's position stays valid until the idle sweep removes lanes.
    private typealias Lanes = OrderedDictionary<VehicleIdentity, VehicleLane>
    private var lanes: Lanes = [:]
    private var ready = Deque<VehicleIdentity>()
    private var deferred = Heap<DueVehicle>()
    /// Dead letters ordered and not yet ended: workers are released only after them.
    private var letters = LetterQueue()
    private var waiters = Deque<Waiter>()
    /// Advances with every assignment (the first is epoch 1): a vehicle's first request in a new
    /// epoch reads its live location.
    private var epoch: UInt64 = 0
    private var intakeClosed = false
    public private(set) var requestsInFlight = 0
    /// Vehicles waiting to retry after a Fleet Engine failure (not a signer failure).
    public private(set) var vehiclesFailing = 0
    /// Since when Fleet Engine fails for most vehicles, while it does.
    private var outageSince: ContinuousClock.Instant?
    /// When finished offsets are next committed; nil while nothing waits to be committed.
    private var commitDue: ContinuousClock.Instant?
    /// The commit ordered last, while its answer is awaited, and when it counts as failed.
    private var commitUnderWay: (order: CommitOrder, answerBy: ContinuousClock.Instant)?
    private var lastCommitOrderedAt: ContinuousClock.Instant?
    private var commitOrders: UInt64 = 0
    private var nextSweep: ContinuousClock.Instant
    /// What the timer sleeps until, while it sleeps.
    private var timerDeadline: ContinuousClock.Instant
    private var timerSleeping = false
    /// The pause wish last handed out in the actions, and its sequence number.
    private var announcedPauseWish: Set<TopicPartition> = []
    private var pauseWishes: UInt64 = 0
    /// Records wait before they can be taken in (their schema cannot be fetched): fetching
    /// pauses for every partition until they are taken in, since nothing more can be meanwhile.
    private var recordsWaiting = false
    private var announcedVehiclesFailing = 0
    /// Unfinished records on all partitions, kept up to date rather than summed per event.
    public private(set) var unfinishedRecords = 0
    /// Unfinished records reached `burstRecords` and have not yet fallen to a tenth of it.
    private var burstUnderWay = false
    /// No more records will come (`endInput`): what is queued goes out, then workers stop.
    private var inputEnded = false
    /// Vehicles with less than a full request wait for more fixes (`holdsPartialRequests`).
    private var holdingPartialRequests: Bool
    private var concurrency: ConcurrencyLimit?
    private var budget: RequestBudget?
    /// When the request budget next has a token, while a ready vehicle waits for one.
    private var budgetDue: ContinuousClock.Instant?

    public init(limits: Limits, now: ContinuousClock.Instant) {
        self.limits = limits
        self.nextSweep = now + limits.vehicleIdleLimit / 2
        self.timerDeadline = nextSweep
        self.holdingPartialRequests = limits.holdsPartialRequests
        self.concurrency = limits.concurrency.map(ConcurrencyLimit.init)
        self.budget = limits.maximumRequestsPerSecond.map { RequestBudget(rate: $0, now: now) }
    }

    /// Attempts that may be under way now (the adaptive limit, else unbounded).
    public var concurrencyLimit: Int? { concurrency?.limit }

    // MARK: Partitions

    public mutating func assign(_ assigned: [TopicPartition], generation: UInt64) -> Actions {
        for partition in assigned {
            unfinishedRecords -= partitions.updateValue(PartitionProgress(generation: generation), forKey: partition)?
                .unfinished.count ?? 0
        }
        epoch += 1
        var actions = Actions()
        for partition in partitions.keys { updatePause(partition, &actions) }
        return finished(actions, wishChanged: true)
    }

    /// Stops new work on the partitions. Requests and dead letters under way are not
    /// cancelled but waited for (`workUnderWay`): a cancelled request may still be applied by
    /// Fleet Engine, later than the next owner's newer fix. What finished is then committed.
    public mutating func beginRevoke(_ revoking: [TopicPartition]) {
        for partition in revoking where partitions[partition] != nil {
            partitions[partition]!.revoking = true
        }
    }

    /// What finished on partitions being revoked, to commit before the revoke waits for the
    /// work under way: a member dropped from the group while it waits cannot commit any more.
    public func offsetsToCommit(revoking revoked: [TopicPartition]) -> [TopicPartitionOffset] {
        revoked.compactMap { partition in
            partitions[partition].flatMap { $0.revoking ? $0.offsetToCommit : nil }
                .map { TopicPartitionOffset(partition, offset: $0) }
        }
    }

    /// A commit inside the revoke succeeded: the final commit then carries only what finished since.
    public mutating func committedDuringRevoke(_ offsets: [TopicPartitionOffset]) {
        for entry in offsets where partitions[entry.topicPartition]?.revoking == true {
            partitions[entry.topicPartition]!.recordCommitted(entry.offset)
        }
    }

    public func workUnderWay(in partitions: [TopicPartition]) -> Int {
        partitions.reduce(0) { $0 + (self.partitions[$1]?.workUnderWay ?? 0) }
    }

    /// Forgets the partitions; returns their final commit offsets (those not yet committed).
    public mutating func finishRevoke(_ revoked: [TopicPartition]) -> (offsets: [TopicPartitionOffset], actions: Actions) {
        let offsets = revoked.compactMap { partition -> TopicPartitionOffset? in
            guard let progress = partitions.removeValue(forKey: partition) else { return nil }
            unfinishedRecords -= progress.unfinished.count
            return progress.offsetToCommit.map { TopicPartitionOffset(partition, offset: $0) }
        }
        var actions = Actions()
        for partition in partitions.keys { updatePause(partition, &actions) }
        return (offsets, finished(actions, wishChanged: true))
    }

    /// Whether work on the record should go on: its partition is assigned under the same
    /// generation and not being revoked.
    public func owns(_ source: RecordSource) -> Bool {
        guard let partition = partitions[source.topicPartition] else { return false }
        return partition.generation == source.generation && !partition.revoking
    }

    // MARK: Records

    /// Takes consumed records in. Records of partitions not (or no longer) ours, or
    /// already registered, are skipped; bad ones are ordered dead-lettered at once.
    public mutating func consume(_ records: [ConsumedRecord], now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        guard !intakeClosed else { return actions }
        for record in records {
            let source = record.source
            guard owns(source), partitions[source.topicPartition]!.register(source.offset, at: now) else { continue }
            unfinishedRecords += 1
            actions.registered[source.topicPartition, default: 0] += 1
            switch record {
            case .fix(let fix):
                let lane = laneIndex(fix.update.vehicle, now: now)
                lanes.values[lane].queued.append(fix)
                lanes.values[lane].lastActive = now
                schedule(fix.update.vehicle, at: lane, now: now, &actions)
            case .bad(let source, let reason, let detail):
                orderDeadLetter(source, reason: reason, detail: detail, &actions)
            case .skipped(let source):
                finish(source, now: now, &actions)
                actions.skippedRecords += 1
            }
        }
        for partition in actions.registered.keys { updatePause(partition, &actions) }
        updateHolding(now: now, &actions)
        serveWaiters(now: now, &actions)
        return finished(actions)
    }

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

    /// A dead letter that cannot be written here at all (no dead-letter topic): its record stays
    /// unfinished, for a resumed run; the workers no longer wait for it.
    public mutating func deadLetterWithoutTopic(now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        letterEnded(now: now, &actions)
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

    private mutating func letterEnded(now: ContinuousClock.Instant, _ actions: inout Actions) {
        if letters.ended() { serveWaiters(now: now, &actions) }
    }

    /// Letters whose backoff ended are ordered again; those of partitions no longer ours are dropped.
    private mutating func orderDueLetters(now: ContinuousClock.Instant, _ actions: inout Actions) {
        for order in letters.takeDue(now: now) {
            if owns(order.source) {
                actions.deadLetters.append(order)
            } else {
                dropLetter(order, now: now, &actions)
            }
        }
    }

    /// A letter of a partition revoked or revoking: its work there ends, so that a revoke does
    /// not wait for a topic that refuses letters.
    private mutating func dropLetter(_ order: DeadLetterOrder, now: ContinuousClock.Instant, _ actions: inout Actions) {
        endWork(on: [PartitionGeneration(order.source.topicPartition, order.source.generation)], &actions)
        letterEnded(now: now, &actions)
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
    /// dead-lettered instead. `random` draws the jitter (tests pass a fixed one).
    public mutating func complete(_ request: CoalescedRequest, _ delivery: Delivery, now: ContinuousClock.Instant,
                                  random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) -> Actions {
        var actions = Actions()
        adaptConcurrency(to: request, delivery, now: now, &actions)
        let lane = lanes.index(forKey: request.update.vehicle)
        if let lane {
            lanes.values[lane].learn(newestKnownMilliseconds: delivery.newestKnownMilliseconds)
        }
        switch delivery.outcome {
        case .accepted, .stale:
            for source in request.sources { finish(source, now: now, &actions) }
        case .rejected(let reason, let detail):
            for source in request.sources { orderDeadLetter(source, reason: reason, detail: detail, &actions) }
        case .abandoned:
            putBack(request)
        case .retry(let failure):
            retry(request, after: failure, now: now, random: random, &actions)
            endRequest(request, now: now, &actions)
            updateHolding(now: now, &actions)
            return finished(actions)
        }
        if let lane {
            if delivery.liveChecked, let checked = request.liveCheckEpoch { lanes.values[lane].verifiedEpoch = checked }
            setRetry(nil, at: lane)
            lanes.values[lane].lastRequestEndedAt = now
        }
        endRequest(request, now: now, &actions)
        updateOutage(now: now, failure: nil, &actions)
        updateHolding(now: now, &actions)
        return finished(actions)
    }

    /// Puts an unsent request's fixes whose partitions are still ours back at the front of the
    /// vehicle's queue, oldest first: left out, their records would stay unfinished and hold the
    /// commit for good. False after shutdown began (nothing is queued again) or when the
    /// vehicle was forgotten.
    @discardableResult
    private mutating func putBack(_ request: CoalescedRequest) -> Bool {
        guard !intakeClosed, let lane = lanes.index(forKey: request.update.vehicle) else { return false }
        let unsent = (request.carried + [request.newest]).filter { owns($0.source) }
        lanes.values[lane].queued.insert(contentsOf: unsent, at: 0)
        return true
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
        if failure.isFleetEngine { lanes[vehicle]?.lastRequestEndedAt = now }
        if let deadline = limits.retryDeadline, now - failingSince >= deadline {
            let detail = "Gave up after \(request.retryAttempts + 1) attempts in \(Self.seconds(now - failingSince)); last cause: \(failure.cause): \(failure.detail)"
            for source in request.sources {
                orderDeadLetter(source, reason: UpdateForwarder.retryDeadlineExceeded, detail: detail, &actions)
            }
            if let lane = lanes.index(forKey: vehicle) { setRetry(nil, at: lane) }
        } else if putBack(request), let lane = lanes.index(forKey: vehicle), !lanes.values[lane].queued.isEmpty {
            setRetry(VehicleLane.Retry(attempts: request.retryAttempts + 1, since: failingSince,
                                       fleetEngine: failure.isFleetEngine), at: lane)
            let delay = limits.retryPolicy.delay(attempt: request.retryAttempts, retryAfterSeconds: failure.retryAfterSeconds,
                                                 random: random)
            deferVehicle(vehicle, at: lane, until: now + delay, &actions)
        } else if let lane = lanes.index(forKey: vehicle) {
            setRetry(nil, at: lane)  // nothing of it is ours any more
        }
        updateOutage(now: now, failure: failure, &actions)
    }

    /// Feeds the attempt's end to the concurrency limit: a 429 throttles; 503s and timeouts only
    /// while Fleet Engine fails for most vehicles held (a few refused vehicles, even when they
    /// are all the traffic left, say nothing about the project) and most attempts end so; an
    /// answer's latency against its baseline.
    private mutating func adaptConcurrency(to request: CoalescedRequest, _ delivery: Delivery, now: ContinuousClock.Instant,
                                           _ actions: inout Actions) {
        guard var limit = concurrency, let startedAt = request.startedAt else { return }
        let signal: ConcurrencyLimit.Signal = switch delivery.outcome {
        case .retry(let failure) where failure.cause == "http_429": .throttled
        case .retry(let failure) where failure.isFleetEngine && mostVehiclesFailing: .overloaded
        case .retry, .abandoned: .neutral
        case .accepted, .stale, .rejected: delivery.fleetEngineLatency.map { .answered(latency: $0) } ?? .neutral
        }
        let before = limit.limit
        actions.throttling = limit.record(signal, startedAt: startedAt, saturated: requestsInFlight >= before, now: now)
        if limit.limit != before { actions.concurrencyLimit = limit.limit }
        concurrency = limit
    }

    private static func seconds(_ duration: Duration) -> String {
        "\(Int(duration.inSeconds.rounded())) s"
    }

    /// Sets a lane's retry state, keeping the count of vehicles failing at Fleet Engine.
    private mutating func setRetry(_ retry: VehicleLane.Retry?, at lane: Lanes.Index) {
        if lanes.values[lane].retry?.fleetEngine == true { vehiclesFailing -= 1 }
        if retry?.fleetEngine == true { vehiclesFailing += 1 }
        lanes.values[lane].retry = retry
    }

    /// More than half the vehicles held wait to retry after a Fleet Engine failure: an outage
    /// begins, and 503s count as the project being throttled.
    private var mostVehiclesFailing: Bool { vehiclesFailing * 2 > lanes.count }

    /// Begins an outage when more than half the vehicles held wait after a Fleet Engine
    /// failure, and ends it once at most a third do: a few vehicles Fleet Engine keeps
    /// refusing are no outage, and the report does not flap with each answer.
    private mutating func updateOutage(now: ContinuousClock.Instant, failure: TransientFailure?, _ actions: inout Actions) {
        if let since = outageSince {
            if vehiclesFailing * 3 <= lanes.count {
                outageSince = nil
                actions.outage = .ended(lasted: now - since)
            }
        } else if let failure, failure.isFleetEngine, mostVehiclesFailing {
            outageSince = now
            actions.outage = .began(failingVehicles: vehiclesFailing, vehicles: lanes.count, failure: failure)
        }
    }

    /// Stops intake for good (shutdown): fetching pauses for every partition, now and after any
    /// later assignment; every queued fix is dropped, unsent and unfinished, so it stays
    /// uncommitted; workers are released once the requests under way ended.
    public mutating func closeIntake(now: ContinuousClock.Instant) -> Actions {
        intakeClosed = true
        for vehicle in lanes.keys {
            lanes[vehicle]!.queued = []
            lanes[vehicle]!.schedule = .idle
        }
        ready = []
        deferred = Heap()
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

    /// Records wait before they can be taken in (`waiting`: their schema cannot be fetched), or
    /// no longer do: fetching pauses for every partition meanwhile, since the reader takes in
    /// nothing more until they are, and resumes as the shares say once they were.
    public mutating func recordsWait(_ waiting: Bool) -> Actions {
        guard waiting != recordsWaiting else { return Actions() }
        recordsWaiting = waiting
        return finished(Actions(), wishChanged: true)
    }

    // MARK: Deadlines

    /// The next moment something is due: a deferred vehicle, or forgetting idle vehicles. The
    /// sweep is always due at some point, so a sleeping timer never misses the first vehicle.
    public var nextDeadline: ContinuousClock.Instant {
        var next = deferred.min.map { min($0.due, nextSweep) } ?? nextSweep
        if let letter = letters.nextDue { next = min(next, letter) }
        if let budgetDue { next = min(next, budgetDue) }
        // While a commit awaits its answer, the next one waits for that answer (or its limit).
        if let commitUnderWay {
            next = min(next, commitUnderWay.answerBy)
        } else if let commitDue {
            next = min(next, commitDue)
        }
        return next
    }

    /// The timer goes to sleep until the returned deadline, or until an event wakes it.
    public mutating func timerWillSleep() -> ContinuousClock.Instant {
        timerSleeping = true
        timerDeadline = nextDeadline
        return timerDeadline
    }

    /// The timer woke: vehicles whose time came are scheduled, idle vehicles forgotten.
    public mutating func deadlineReached(now: ContinuousClock.Instant) -> Actions {
        timerSleeping = false
        if let due = budgetDue, due <= now { budgetDue = nil }
        var actions = Actions()
        while let first = deferred.min, first.due <= now {
            deferred.removeMin()
            guard let lane = lanes.index(forKey: first.vehicle), lanes.values[lane].schedule == .deferred else { continue }
            lanes.values[lane].schedule = .idle
            schedule(first.vehicle, at: lane, now: now, &actions)
        }
        if now >= nextSweep { forgetIdleVehicles(now: now) }
        orderDueLetters(now: now, &actions)
        commitIfDue(now: now, &actions)
        serveWaiters(now: now, &actions)
        updateHolding(now: now, &actions)
        return finished(actions)
    }

    // MARK: Commits

    /// Offsets that advanced since the last commit, by partition.
    public func offsetsToCommit() -> [TopicPartitionOffset] {
        partitions.compactMap { partition, progress in
            progress.offsetToCommit.map { TopicPartitionOffset(partition, offset: $0) }
        }.sorted { $0.topicPartition < $1.topicPartition }
    }

    /// The broker answered a commit (`failure` nil: committed). Only partitions still assigned
    /// under the generation the order was made in learn the offset: an answer for a partition
    /// revoked or reassigned since says nothing about its current owner's position.
    public mutating func commitAnswered(_ order: CommitOrder, failure: String?, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        if commitUnderWay?.order.id == order.id {
            commitUnderWay = nil
            if let commitDue { wakeTimer(for: commitDue, &actions) }
        }
        if let failure {
            actions.commitFailure = failure
        } else {
            actions.committed = true
            for entry in order.offsets where partitions[entry.topicPartition]?.generation == order.generations[entry.topicPartition] {
                partitions[entry.topicPartition]!.recordCommitted(entry.offset)
            }
        }
        if !offsetsToCommit().isEmpty { scheduleCommit(now: now, &actions) }
        return finished(actions)
    }

    /// Something finished: a commit is due one interval after the last one was ordered (at once
    /// when that is past), unless one is due already.
    private mutating func scheduleCommit(now: ContinuousClock.Instant, _ actions: inout Actions) {
        guard commitDue == nil else { return }
        let due = lastCommitOrderedAt.map { max(now, $0 + limits.commitInterval) } ?? now
        commitDue = due
        if commitUnderWay == nil { wakeTimer(for: due, &actions) }
    }

    /// Wakes a timer sleeping past `due`.
    private mutating func wakeTimer(for due: ContinuousClock.Instant, _ actions: inout Actions) {
        if timerSleeping, due < timerDeadline {
            timerDeadline = due
            actions.wakeTimer = true
        }
    }

    /// Orders a commit when one is due and none is awaited; a commit unanswered for
    /// `commitAnswerLimit` counts as failed, so a lost answer never stops committing.
    private mutating func commitIfDue(now: ContinuousClock.Instant, _ actions: inout Actions) {
        if let underWay = commitUnderWay, now >= underWay.answerBy {
            commitUnderWay = nil
            actions.commitFailure = "no answer within \(Self.seconds(Limits.commitAnswerLimit))"
            scheduleCommit(now: now, &actions)
        }
        guard let due = commitDue, now >= due, commitUnderWay == nil else { return }
        commitDue = nil
        // A partition being revoked commits in its revoke, with what finished by then.
        let offsets = offsetsToCommit().filter { partitions[$0.topicPartition]?.revoking == false }
        guard !offsets.isEmpty else { return }
        commitOrders += 1
        let order = CommitOrder(id: commitOrders, offsets: offsets,
                                generations: Dictionary(uniqueKeysWithValues: offsets.map {
                                    ($0.topicPartition, partitions[$0.topicPartition]!.generation)
                                }))
        lastCommitOrderedAt = now
        commitUnderWay = (order, now + Limits.commitAnswerLimit)
        actions.commit = order
    }

    // MARK: Observation

    public var assignedPartitions: [TopicPartition] { partitions.keys.sorted() }
    /// Every partition while records wait to be taken in or after intake closed (shutdown);
    /// otherwise those holding their share of unfinished records.
    public var pauseWish: Set<TopicPartition> {
        recordsWaiting || intakeClosed ? Set(partitions.keys) : Set(partitions.filter(\.value.paused).keys)
    }
    public var unfinishedPerPartition: [TopicPartition: Int] { partitions.mapValues(\.unfinished.count) }
    public var uncommittedRecords: Int64 { partitions.values.reduce(0) { $0 + $1.uncommitted } }
    public var lastCommittedOffsets: [TopicPartition: Int64] { partitions.compactMapValues(\.lastCommitted) }
    public var vehicleCount: Int { lanes.count }
    public var queuedFixes: Int { lanes.values.reduce(0) { $0 + $1.queued.count } }
    public var readyVehicles: Int { ready.count }
    public var waitingWorkers: Int { waiters.count }

    public func oldestUnfinishedAge(now: ContinuousClock.Instant) -> [TopicPartition: Duration] {
        partitions.mapValues { $0.oldestUnfinishedAge(now: now) }
    }

    // MARK: Vehicles

    /// Puts a vehicle with fixes and nothing under way into the ready queue, or defers it
    /// until its minimum interval since the end of its last request passed.
    /// `lane` is the vehicle's index in `lanes`: each event looks a vehicle up once.
    private mutating func schedule(_ vehicle: VehicleIdentity, at lane: Lanes.Index, now: ContinuousClock.Instant,
                                   _ actions: inout Actions) {
        guard lanes.values[lane].wantsScheduling else { return }
        if holdingPartialRequests, lanes.values[lane].queued.count <= limits.pastLocations { return }
        if limits.minimumInterval > .zero, let lastEnded = lanes.values[lane].lastRequestEndedAt,
           now < lastEnded + limits.minimumInterval {
            deferVehicle(vehicle, at: lane, until: lastEnded + limits.minimumInterval, &actions)
        } else {
            lanes.values[lane].schedule = .ready
            ready.append(vehicle)
        }
    }

    /// The vehicle's lane, created when new.
    private mutating func laneIndex(_ vehicle: VehicleIdentity, now: ContinuousClock.Instant) -> Lanes.Index {
        if let index = lanes.index(forKey: vehicle) { return index }
        lanes[vehicle] = VehicleLane(now: now)
        return lanes.index(forKey: vehicle)!
    }

    private mutating func deferVehicle(_ vehicle: VehicleIdentity, at lane: Lanes.Index, until due: ContinuousClock.Instant,
                                       _ actions: inout Actions) {
        lanes.values[lane].schedule = .deferred
        deferred.insert(DueVehicle(due: due, vehicle: vehicle))
        wakeTimer(for: due, &actions)
    }

    /// The next request from the ready queue: the vehicle's fixes still ours, coalesced;
    /// fixes not newer than what Fleet Engine holds finish as stale.
    private mutating func takeReadyRequest(now: ContinuousClock.Instant, _ actions: inout Actions) -> CoalescedRequest? {
        while let vehicle = ready.popFirst() {
            guard let lane = lanes.index(forKey: vehicle), lanes.values[lane].schedule == .ready else { continue }
            lanes.values[lane].schedule = .idle
            let queued = lanes.values[lane].queued
            lanes.values[lane].queued = []
            let coalesced = Coalescer.coalesce(
                vehicle: vehicle, fixes: queued.allSatisfy { owns($0.source) } ? queued : queued.filter { owns($0.source) },
                newestAcceptedMilliseconds: lanes.values[lane].newestKnownMilliseconds, pastLimit: limits.pastLocations)
            lanes.values[lane].queued = coalesced.later
            for fix in coalesced.stale { finish(fix.source, now: now, &actions) }
            actions.staleFixes += coalesced.stale.count
            guard var request = coalesced.request else {
                setRetry(nil, at: lane)  // nothing left to retry
                continue
            }
            if limits.readsLiveLocationBeforeEveryRequest || lanes.values[lane].verifiedEpoch != epoch {
                request.liveCheckEpoch = epoch
            }
            request.retryAttempts = Int(lanes.values[lane].retry?.attempts ?? 0)
            request.failingSince = lanes.values[lane].retry?.since
            lanes.values[lane].inFlight = true
            requestsInFlight += 1
            for site in request.partitions { partitions[site.topicPartition]?.workUnderWay += 1 }
            return request
        }
        return nil
    }

    private mutating func endRequest(_ request: CoalescedRequest, now: ContinuousClock.Instant, _ actions: inout Actions) {
        requestsInFlight -= 1
        endWork(on: request.partitions, &actions)
        if let lane = lanes.index(forKey: request.update.vehicle) {
            lanes.values[lane].inFlight = false
            lanes.values[lane].lastActive = now
            schedule(request.update.vehicle, at: lane, now: now, &actions)
        }
        serveWaiters(now: now, &actions)
    }

    /// No request will come any more: intake closed and nothing is under way, or the input
    /// ended and nothing is queued, deferred or under way; and no dead letter is outstanding
    /// (the workers' end is what ends the dead-letter writer).
    private var isDrained: Bool {
        requestsInFlight == 0 && letters.isSettled && (intakeClosed || (inputEnded && ready.isEmpty && deferred.isEmpty))
    }

    private mutating func serveWaiters(now: ContinuousClock.Instant, _ actions: inout Actions) {
        while !waiters.isEmpty {
            if requestsInFlight >= concurrency?.limit ?? .max, !intakeClosed { return }
            if !ready.isEmpty, !intakeClosed, budget != nil, !budget!.take(now: now) {
                waitForBudget(now: now, &actions)
                return
            }
            budgetDue = nil
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

    /// A ready vehicle waits for the request budget's next token: a deadline, not a sleeping worker.
    private mutating func waitForBudget(now: ContinuousClock.Instant, _ actions: inout Actions) {
        let due = budget!.nextToken(now: now)
        budgetDue = due
        wakeTimer(for: due, &actions)
    }

    /// One pass over every lane, at most twice per idle limit: the cost stays a small
    /// fraction of the work the lanes did meanwhile.
    private mutating func forgetIdleVehicles(now: ContinuousClock.Instant) {
        nextSweep = now + limits.vehicleIdleLimit / 2
        lanes = lanes.filter { _, lane in !lane.isIdle || now - lane.lastActive < limits.vehicleIdleLimit }
        vehiclesFailing = lanes.values.count { $0.retry?.fleetEngine == true }
    }

    // MARK: Offsets and flow control

    private mutating func finish(_ source: RecordSource, now: ContinuousClock.Instant, _ actions: inout Actions) {
        guard partitions[source.topicPartition]?.generation == source.generation else { return }
        if partitions[source.topicPartition]!.finish(source.offset) { unfinishedRecords -= 1 }
        updatePause(source.topicPartition, &actions)
        scheduleCommit(now: now, &actions)
    }

    private mutating func orderDeadLetter(_ source: RecordSource, reason: String, detail: String,
                                          _ actions: inout Actions) {
        if partitions[source.topicPartition]?.generation == source.generation {
            partitions[source.topicPartition]!.workUnderWay += 1
        }
        letters.ordered()
        actions.deadLetters.append(DeadLetterOrder(source: source, reason: reason, detail: detail))
    }

    private mutating func endWork(on sites: [PartitionGeneration], _ actions: inout Actions) {
        for site in sites where partitions[site.topicPartition]?.generation == site.generation {
            partitions[site.topicPartition]!.workUnderWay -= 1
            if partitions[site.topicPartition]!.workUnderWay == 0 { actions.workFinished = true }
        }
    }

    /// Unfinished records per partition at which its fetching pauses: an equal share of the bound.
    private var share: Int { max(1, limits.maximumPendingRecords / max(1, partitions.count)) }

    /// Pauses a partition holding its share of unfinished records, and resumes it once half
    /// of that finished. Unfinished records are counted, not the window behind the oldest,
    /// so a vehicle stuck in retries holds back only its own partition.
    private mutating func updatePause(_ partition: TopicPartition, _ actions: inout Actions) {
        guard !intakeClosed, let progress = partitions[partition] else { return }
        let unfinished = progress.unfinished.count
        if !progress.paused, unfinished >= share {
            partitions[partition]!.paused = true
            actions.pausing.append(partition)
        } else if progress.paused, unfinished <= share / 2 {
            partitions[partition]!.paused = false
            actions.resuming.append(partition)
        }
    }

    /// Vehicles wait for a full request while the input flows, unless fetching is paused and
    /// nothing but held vehicles is left to finish records: fetching that waits for records to
    /// finish must not wait for vehicles that wait for more records. When holding stops, every
    /// held vehicle goes out; holding resumes once fetching does.
    private mutating func updateHolding(now: ContinuousClock.Instant, _ actions: inout Actions) {
        guard limits.holdsPartialRequests else { return }
        let paused = partitions.values.contains(where: \.paused)
        let holding = if inputEnded {
            false
        } else if holdingPartialRequests {
            !(paused && requestsInFlight == 0 && ready.isEmpty && deferred.isEmpty)
        } else {
            !paused  // released: holds again once fetching resumed
        }
        defer { holdingPartialRequests = holding }
        guard holdingPartialRequests, !holding else { return }
        holdingPartialRequests = false
        for lane in lanes.values.indices where lanes.values[lane].wantsScheduling {
            schedule(lanes.keys[lane], at: lane, now: now, &actions)
        }
        serveWaiters(now: now, &actions)
    }

    /// A burst begins at `burstRecords` unfinished records and has drained once a tenth of
    /// that is left: reported once, so that the memory it took can go back to the system.
    private mutating func noteBurst(_ actions: inout Actions) {
        if !burstUnderWay, unfinishedRecords >= limits.burstRecords {
            burstUnderWay = true
        } else if burstUnderWay, unfinishedRecords <= limits.burstRecords / 10 {
            burstUnderWay = false
            actions.burstDrained = true
        }
    }

    /// Completes an event's actions with the pause wish, when it differs from the last one
    /// handed out. After an assignment change (or a change of `recordsWaiting`) it is handed out
    /// even when no partition flipped, so that a revoked partition's pause never lingers in the
    /// consumer's wish.
    private mutating func finished(_ actions: Actions, wishChanged: Bool = false) -> Actions {
        var actions = actions
        noteBurst(&actions)
        if vehiclesFailing != announcedVehiclesFailing {
            announcedVehiclesFailing = vehiclesFailing
            actions.vehiclesFailing = vehiclesFailing
        }
        guard wishChanged || !actions.pausing.isEmpty || !actions.resuming.isEmpty else { return actions }
        let wish = pauseWish
        guard wishChanged || wish != announcedPauseWish else { return actions }
        announcedPauseWish = wish
        pauseWishes += 1
        actions.pause = PauseChange(wish: wish, sequence: pauseWishes,
                                    pausing: actions.pausing.filter(wish.contains).sorted(),
                                    resuming: actions.resuming.filter { !wish.contains($0) }.sorted(), share: share,
                                    recordsWait: recordsWaiting)
        return actions
    }
}
