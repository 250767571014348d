import DequeModule
import FleetModel
import HeapModule
import Kafka
import OrderedCollections

/// The vehicles the pipeline holds: each vehicle's lane (fixes waiting, request under way,
/// what Fleet Engine is known to hold, retry state), the ready queue, the vehicles deferred
/// until a due time, and holding for full requests. It knows nothing of offsets: the pipeline
/// says which records are still owned and finishes the stale ones it hands back.
///
/// Guarantee: one request per vehicle at a time, built from its queue only when the previous
/// one ended, and never carrying a fix at or before the newest one Fleet Engine is known to hold.
struct VehicleScheduler {
    /// The due time is kept as a `Moment`: a resilient `ContinuousClock.Instant` in it made every
    /// function that names the type ask for its metadata at run time.
    private struct DueVehicle: Comparable {
        private let dueMoment: Moment
        let vehicle: VehicleIdentity
        let lane: LaneHandle

        init(due: ContinuousClock.Instant, vehicle: VehicleIdentity, lane: LaneHandle) {
            self.dueMoment = Moment(due)
            self.vehicle = vehicle
            self.lane = lane
        }

        var due: ContinuousClock.Instant { dueMoment.instant }

        static func < (lhs: DueVehicle, rhs: DueVehicle) -> Bool { lhs.dueMoment < rhs.dueMoment }
        static func == (lhs: DueVehicle, rhs: DueVehicle) -> Bool { lhs.dueMoment == rhs.dueMoment && lhs.vehicle == rhs.vehicle }
    }

    /// Lanes stored densely, beside a compact hash table of their positions: a `Dictionary`
    /// keeps every key and lane in its buckets, most of them empty (at 100,000 vehicles 262,144
    /// buckets of 96 bytes). A lane's position stays valid until the idle sweep removes lanes.
    typealias Lanes = OrderedDictionary<VehicleIdentity, VehicleLane>

    /// A lane's position as of a number of idle sweeps: only a sweep removes lanes and moves
    /// the others, so a position taken since the last one is still the lane's. A request and a
    /// ready or deferred vehicle carry one, and each step from the ready queue to a request's
    /// end reaches the lane without hashing the vehicle (each a few cache misses in a large fleet).
    struct LaneHandle {
        fileprivate let index: Lanes.Index
        fileprivate let sweep: UInt32
    }

    private struct ReadyVehicle {
        let vehicle: VehicleIdentity
        let lane: LaneHandle
    }

    let pastLocations: Int
    let minimumInterval: Duration
    private var lanes: Lanes = [:]
    /// Idle sweeps so far, wrapping: what a `LaneHandle` is checked against.
    private var sweeps: UInt32 = 0
    private var ready = Deque<ReadyVehicle>()
    private var deferred = Heap<DueVehicle>()
    /// Vehicles with less than a full request wait for more fixes.
    var holdsPartialRequests: Bool
    /// Vehicles waiting to retry after a Fleet Engine failure (not a signer failure).
    private(set) var vehiclesFailing = 0
    /// A vehicle's first 429 in a row sends it back to the head of the ready queue (the
    /// pipeline paces at a rate learnt from 429s); false: it backs off like any failure.
    var keepsPlaceOnThrottle = false

    init(pastLocations: Int, minimumInterval: Duration, holdsPartialRequests: Bool) {
        self.pastLocations = pastLocations
        self.minimumInterval = minimumInterval
        self.holdsPartialRequests = holdsPartialRequests
    }

    // MARK: Queueing

    /// Queues a fix in its vehicle's lane (made when new) and schedules the vehicle; returns a
    /// due time when it was deferred (the timer must hear of it). `moment` is `now` as a
    /// `Moment`, made once per chunk: converting an instant per fix costs 128-bit divisions.
    mutating func enqueue(_ fix: consuming PendingFix, now: ContinuousClock.Instant, moment: Moment) -> ContinuousClock.Instant? {
        let vehicle = fix.update.vehicle
        let lane = laneIndex(vehicle, now: now)
        lanes.values[lane].takeIn(fix, at: moment)
        return schedule(vehicle, at: lane, now: now)
    }

    /// Puts a vehicle with fixes and nothing under way into the ready queue, or defers it
    /// until its minimum interval since the end of its last request passed (returned).
    /// `lane` is the vehicle's index in `lanes`: each event looks a vehicle up once.
    private mutating func schedule(_ vehicle: VehicleIdentity, at lane: Lanes.Index,
                                   now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        let (holding, pastLocations, minimumInterval) = (holdsPartialRequests, pastLocations, minimumInterval)
        let scheduling: Scheduling = inPlace(lane) { lane in
            guard lane.wantsScheduling, !(holding && lane.queued.count <= pastLocations) else { return .unchanged }
            if minimumInterval > .zero, let lastEnded = lane.lastRequestEndedAt, now < lastEnded + minimumInterval {
                return .deferred(until: Moment(lastEnded + minimumInterval))
            }
            lane.schedule = .ready
            return .ready
        }
        switch scheduling {
        case .unchanged: return nil
        case .deferred(let due): return deferVehicle(vehicle, at: lane, until: due.instant)
        case .ready:
            ready.append(ReadyVehicle(vehicle: vehicle, lane: handle(lane)))
            return nil
        }
    }

    private func handle(_ lane: Lanes.Index) -> LaneHandle {
        LaneHandle(index: lane, sweep: sweeps)
    }

    /// The vehicle's lane, through `handle` when no sweep ran since it was taken; nil when the
    /// vehicle was forgotten.
    private func lane(of vehicle: VehicleIdentity, _ handle: LaneHandle?) -> Lanes.Index? {
        if let handle, handle.sweep == sweeps {
            assert(lanes.keys[handle.index] == vehicle, "a lane's position holds until a sweep")
            return handle.index
        }
        return lanes.index(forKey: vehicle)
    }

    private func lane(of request: CoalescedRequest) -> Lanes.Index? {
        lane(of: request.update.vehicle, request.lane)
    }

    /// What scheduling a vehicle came to. The due time is a `Moment`: with a resilient
    /// `ContinuousClock.Instant` in it, every copy of the enum went through its metadata (2 %
    /// of a backlog drain's relay CPU).
    private enum Scheduling {
        /// Nothing to schedule, a request under way, already scheduled, or holding for more fixes.
        case unchanged
        case ready
        /// Its minimum interval since its last request has not passed.
        case deferred(until: Moment)
    }

    /// Reads and changes a lane in place, once: reading a field through the values' getter
    /// copies the whole lane, its queue retained and released, for each field read.
    private mutating func inPlace<Result>(_ lane: Lanes.Index, _ body: (inout VehicleLane) -> Result) -> Result {
        body(&lanes.values[lane])
    }

    private mutating func laneIndex(_ vehicle: VehicleIdentity, now: ContinuousClock.Instant) -> Lanes.Index {
        if let index = lanes.index(forKey: vehicle) { return index }
        lanes[vehicle] = VehicleLane(now: now)
        return lanes.index(forKey: vehicle)!
    }

    private mutating func deferVehicle(_ vehicle: VehicleIdentity, at lane: Lanes.Index,
                                       until due: ContinuousClock.Instant) -> ContinuousClock.Instant {
        lanes.values[lane].schedule = .deferred
        deferred.insert(DueVehicle(due: due, vehicle: vehicle, lane: handle(lane)))
        return due
    }

    /// Every vehicle with fixes and nothing under way is scheduled (holding just stopped);
    /// returns the earliest due time of those deferred.
    mutating func scheduleEveryWaitingVehicle(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        var earliest: ContinuousClock.Instant?
        for lane in lanes.values.indices where lanes.values[lane].wantsScheduling {
            if let due = schedule(lanes.keys[lane], at: lane, now: now) { earliest = min(earliest ?? due, due) }
        }
        return earliest
    }

    /// Deferred vehicles whose time came are scheduled; returns the earliest due time among
    /// those deferred again.
    mutating func releaseDue(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        var earliest: ContinuousClock.Instant?
        while let first = deferred.min, first.due <= now {
            deferred.removeMin()
            guard let lane = lane(of: first.vehicle, first.lane), lanes.values[lane].schedule == .deferred else { continue }
            lanes.values[lane].schedule = .idle
            if let due = schedule(first.vehicle, at: lane, now: now) { earliest = min(earliest ?? due, due) }
        }
        return earliest
    }

    /// Vehicles wait for a full request while the input flows, unless fetching is paused and
    /// nothing but held vehicles is left to finish records: fetching that waits for records to
    /// finish must not wait for vehicles that wait for more records. When holding stops, every
    /// held vehicle is scheduled: returns then (as `.some`) the earliest due time of those
    /// deferred. Holding resumes once fetching does.
    mutating func updateHolding(fetchingPaused: Bool, requestsUnderWay: Int, inputEnded: Bool,
                                now: ContinuousClock.Instant) -> ContinuousClock.Instant?? {
        let holding = if inputEnded {
            false
        } else if holdsPartialRequests {
            !(fetchingPaused && requestsUnderWay == 0 && nothingScheduled)
        } else {
            !fetchingPaused  // released: holds again once fetching resumed
        }
        guard holdsPartialRequests, !holding else {
            holdsPartialRequests = holding
            return nil
        }
        holdsPartialRequests = false
        return .some(scheduleEveryWaitingVehicle(now: now))
    }

    // MARK: Requests

    /// The next request from the ready queue: the vehicle's fixes still owned, coalesced, with
    /// the live location to read first when its lane last took it into account before `epoch`
    /// (or always, `readsLiveLocationEveryTime`). Fixes not newer than what Fleet Engine holds
    /// come back as `stale`, for the caller to finish.
    mutating func takeReady(epoch: UInt64, readsLiveLocationEveryTime: Bool,
                            owns: (RecordSource) -> Bool) -> (request: CoalescedRequest?, stale: [PendingFix]) {
        var stale: [PendingFix] = []
        while let first = ready.popFirst() {
            let vehicle = first.vehicle
            guard let lane = lane(of: vehicle, first.lane) else { continue }
            let taken: (queued: [PendingFix], newestKnown: Int64?)? = inPlace(lane) { lane in
                guard lane.schedule == .ready else { return nil }
                lane.schedule = .idle
                defer { lane.queued = [] }
                return (lane.queued, lane.newestKnownMilliseconds)
            }
            guard let (queued, newestKnown) = taken else { continue }
            let coalesced = Coalescer.coalesce(vehicle: vehicle, fixes: Self.owned(consume queued, owns: owns),
                                               newestAcceptedMilliseconds: newestKnown, pastLimit: pastLocations)
            stale += coalesced.stale
            inPlace(lane) { $0.queued = coalesced.later }
            guard var request = coalesced.request else {
                setRetry(nil, at: lane)  // nothing left to retry
                continue
            }
            inPlace(lane) { lane in
                if readsLiveLocationEveryTime || lane.verifiedEpoch != epoch { request.liveCheckEpoch = epoch }
                request.retryAttempts = Int(lane.retry?.attempts ?? 0)
                request.failingSince = lane.retry?.since
                lane.inFlight = true
            }
            request.lane = handle(lane)
            return (request, stale)
        }
        return (nil, stale)
    }

    /// The fixes whose records are still owned. Ownership goes by partition and generation, and
    /// a vehicle's fixes nearly always share both: it is asked once per run of them, not per fix.
    private static func owned(_ fixes: consuming [PendingFix], owns: (RecordSource) -> Bool) -> [PendingFix] {
        var asked: (partition: TopicPartition, generation: UInt64, owned: Bool)?
        func isOwned(_ source: RecordSource) -> Bool {
            if let asked, asked.generation == source.generation, asked.partition == source.topicPartition { return asked.owned }
            let owned = owns(source)
            asked = (source.topicPartition, source.generation, owned)
            return owned
        }
        return fixes.allSatisfy { isOwned($0.source) } ? fixes : fixes.filter { isOwned($0.source) }
    }

    /// A request's attempt ended: the vehicle learns what Fleet Engine holds.
    mutating func learn(_ request: CoalescedRequest, newestKnownMilliseconds newest: Int64?) {
        // Through the index: the dictionary's keyed modify costs more than a lookup, once per request.
        guard let newest, let lane = lane(of: request) else { return }
        lanes.values[lane].learn(newestKnownMilliseconds: newest)
    }

    /// An attempt was answered (accepted, stale, rejected): retries are over, the minimum
    /// interval counts from now, and a live read made in `checkedEpoch` is taken into account.
    mutating func answered(_ request: CoalescedRequest, checkedEpoch: UInt64?, now: ContinuousClock.Instant) {
        guard let lane = lane(of: request) else { return }
        if let checkedEpoch { lanes.values[lane].verifiedEpoch = checkedEpoch }
        setRetry(nil, at: lane)
        lanes.values[lane].lastRequestEndedAt = now
    }

    /// The request is no longer under way: the vehicle is scheduled again when fixes wait;
    /// returns a due time when it was deferred.
    mutating func requestEnded(_ request: CoalescedRequest, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard let lane = lane(of: request) else { return nil }
        lanes.values[lane].inFlight = false
        lanes.values[lane].lastActive = now
        return schedule(request.update.vehicle, at: lane, now: now)
    }

    /// Puts an unsent request's fixes still owned back at the front of the vehicle's queue,
    /// oldest first: left out, their records would stay unfinished and hold the commit for
    /// good. False when the vehicle was forgotten.
    @discardableResult
    mutating func putBack(_ request: CoalescedRequest, owns: (RecordSource) -> Bool) -> Bool {
        guard let lane = lane(of: request) else { return false }
        let unsent = (request.carried + [request.newest]).filter { owns($0.source) }
        lanes.values[lane].queued.insert(contentsOf: unsent, at: 0)
        return true
    }

    /// A transient failure after `putBack`: the vehicle waits out `backoff` with its retry
    /// state counted, and a try that Fleet Engine failed starts the minimum interval. Returns
    /// the due time, or nil when nothing of it is left to retry. Without a backoff the vehicle
    /// goes back to the head of the ready queue: it keeps its place.
    mutating func retry(_ request: CoalescedRequest, _ retry: VehicleLane.Retry, backoff: Duration?,
                        now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard let lane = lane(of: request) else { return nil }
        let vehicle = request.update.vehicle
        guard !lanes.values[lane].queued.isEmpty else {
            if retry.fleetEngine { lanes.values[lane].lastRequestEndedAt = now }
            setRetry(nil, at: lane)
            return nil
        }
        setRetry(retry, at: lane)
        guard let backoff else {
            lanes.values[lane].schedule = .ready
            ready.prepend(ReadyVehicle(vehicle: vehicle, lane: handle(lane)))
            return nil
        }
        if retry.fleetEngine { lanes.values[lane].lastRequestEndedAt = now }
        return deferVehicle(vehicle, at: lane, until: now + backoff)
    }

    /// What becomes of a request that failed transiently.
    enum RetryOutcome: Equatable {
        /// Its fixes are back at the front of the vehicle's queue, due again at `due` (nil:
        /// nothing of it is left to retry).
        case retrying(due: ContinuousClock.Instant?)
        /// Past the retry deadline: its records are to be dead-lettered, for `detail`.
        case gaveUp(detail: String)
        /// Nothing of it is kept: its partitions are no longer owned, or nothing more is sent.
        case dropped
    }

    /// A transient failure: the fixes go back to the front of the vehicle's queue and the
    /// vehicle is due after a backoff of `policy` (at least the server's `Retry-After`), or past
    /// `deadline` its records are given up. `keepsFixes` false (shutdown): nothing is kept.
    ///
    /// A vehicle's first 429 in a row without `Retry-After` is no failure of the vehicle but
    /// the quota met: it keeps its place at the head of the ready queue, and the rate the
    /// pipeline learns from the 429 decides when it goes. (Behind the whole queue, a cold
    /// fleet's vehicle would wait for every other vehicle's first read.) A second 429 in a row
    /// backs off like any failure, so a vehicle Fleet Engine keeps refusing never spins. A live
    /// location read in `readInEpoch` before a 429 holds: the update was not applied, so the
    /// resend costs one request, not two.
    mutating func failed(_ request: CoalescedRequest, _ failure: TransientFailure, readInEpoch: UInt64? = nil,
                         policy: RetryPolicy, deadline: Duration?,
                         keepsFixes: Bool, owns: (RecordSource) -> Bool, now: ContinuousClock.Instant,
                         random: (ClosedRange<Double>) -> Double) -> RetryOutcome {
        let failingSince = request.failingSince ?? now
        if let deadline, now - failingSince >= deadline {
            gaveUp(request, fleetEngineFailed: failure.isFleetEngine, now: now)
            let took = Int((now - failingSince).inSeconds.rounded())
            return .gaveUp(detail: "Gave up after \(request.retryAttempts + 1) attempts in \(took) s; last cause: \(failure.cause): \(failure.detail)")
        }
        guard keepsFixes, putBack(request, owns: owns) else {
            gaveUp(request, fleetEngineFailed: failure.isFleetEngine, now: now)
            return .dropped
        }
        if failure.isThrottle, let readInEpoch, let lane = lane(of: request) { lanes.values[lane].verifiedEpoch = readInEpoch }
        let keepsPlace = keepsPlaceOnThrottle && failure.isThrottle && failure.retryAfterSeconds == nil && request.retryAttempts == 0
        let backoff = keepsPlace ? nil
            : policy.delay(attempt: request.retryAttempts, retryAfterSeconds: failure.retryAfterSeconds, random: random)
        let state = VehicleLane.Retry(attempts: request.retryAttempts + 1, since: failingSince, fleetEngine: failure.isFleetEngine)
        return .retrying(due: retry(request, state, backoff: backoff, now: now))
    }

    /// The vehicle gave up retrying (its records dead-lettered); a try that Fleet Engine failed
    /// still starts the minimum interval.
    private mutating func gaveUp(_ request: CoalescedRequest, fleetEngineFailed: Bool, now: ContinuousClock.Instant) {
        guard let lane = lane(of: request) else { return }
        if fleetEngineFailed { lanes.values[lane].lastRequestEndedAt = now }
        setRetry(nil, at: lane)
    }

    /// Sets a lane's retry state, keeping the count of vehicles failing at Fleet Engine.
    private mutating func setRetry(_ retry: VehicleLane.Retry?, at lane: Lanes.Index) {
        if lanes.values[lane].retry?.fleetEngine == true { vehiclesFailing -= 1 }
        if retry?.fleetEngine == true { vehiclesFailing += 1 }
        lanes.values[lane].retry = retry
    }

    // MARK: Housekeeping

    /// Drops every queued fix and schedule (shutdown): nothing more is sent.
    mutating func dropEverythingQueued() {
        for lane in lanes.values.indices {
            lanes.values[lane].queued = []
            lanes.values[lane].schedule = .idle
        }
        ready = []
        deferred = Heap()
    }

    /// Forgets vehicles idle for `limit`: memory follows the active vehicles.
    mutating func forgetIdleVehicles(idleFor limit: Duration, now: ContinuousClock.Instant) {
        lanes = lanes.filter { _, lane in !lane.isIdle || now - lane.lastActive < limit }
        sweeps &+= 1
        vehiclesFailing = lanes.values.count { $0.retry?.fleetEngine == true }
    }

    // MARK: Observation

    var vehicleCount: Int { lanes.count }
    var queuedFixes: Int { lanes.values.reduce(0) { $0 + $1.queued.count } }
    var readyVehicles: Int { ready.count }
    /// Nothing ready and nothing deferred: only vehicles holding, idle or under way.
    var nothingScheduled: Bool { ready.isEmpty && deferred.isEmpty }
    var hasReadyVehicles: Bool { !ready.isEmpty }
    var nextDue: ContinuousClock.Instant? { deferred.min?.due }
}
