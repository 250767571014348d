import FleetAuth

/// Queues fixes per vehicle and hands out one request per vehicle at a time.
///
/// At most one request per vehicle is in flight: fixes arriving meanwhile wait
/// and are coalesced into the next request, which is built only after the
/// previous one was answered, so a request can never overtake an older one and
/// move the vehicle backwards. Workers pull requests with `nextRequest()`;
/// their number bounds the requests in flight. With a minimum interval per
/// vehicle, a vehicle becomes ready only that long after its previous request.
/// A request that found no token (signer failing) goes back to its lane and waits
/// out a backoff there, so it does not hold a worker that vehicles with cached
/// tokens could use.
public actor VehicleDispatcher {
    private struct Lane {
        var queued: [PendingFix] = []
        var inFlight = false
        var isReady = false
        var isDeferred = false
        var lastSentAt: ContinuousClock.Instant?
        var newestAcceptedMilliseconds: Int64?
        /// The assignment epoch in which Fleet Engine's live location was last taken into account.
        var verifiedEpoch: UInt64?
        var tokenAttempts = 0
        var awaitingTokenSince: ContinuousClock.Instant?
        /// When the lane last took in a fix or finished a request.
        var lastActive: ContinuousClock.Instant

        /// Nothing queued, under way or scheduled: the lane holds only what it remembers.
        var isIdle: Bool { queued.isEmpty && !inFlight && !isReady && !isDeferred }

        mutating func take(_ fix: PendingFix, at now: ContinuousClock.Instant) {
            queued.append(fix)
            lastActive = now
        }
    }

    private let pastLimit: Int
    private let minimumInterval: Duration
    private let laneIdleLimit: Duration
    private var nextSweep: ContinuousClock.Instant
    private let isCurrent: @Sendable (RecordSource) -> Bool
    private let assignmentEpoch: @Sendable () -> UInt64?
    private let settleStale: @Sendable ([PendingFix]) -> Void
    private var lanes: [VehicleIdentity: Lane] = [:]
    private var ready: [VehicleIdentity] = []
    private var readyHead = 0
    /// Vehicles waiting out their minimum interval or a token backoff, soonest first.
    private var deferred = DueHeap<VehicleIdentity>()
    private var waiters: [CheckedContinuation<CoalescedRequest?, Never>] = []
    private var intakeClosed = false
    public private(set) var inFlight = 0

    /// - Parameters:
    ///   - isCurrent: false for fixes whose partition was revoked since: they are dropped unsent.
    ///   - assignmentEpoch: changes with every partition assignment; a vehicle's first request
    ///     in a new epoch asks for a live-location check (nil: never check).
    ///   - settleStale: called (inside the actor) with fixes dropped as stale.
    ///   - laneIdleLimit: a vehicle with nothing to send for this long is forgotten, so memory
    ///     follows active vehicles. Its next fix starts a new lane, with a live-location check.
    public init(pastLimit: Int = Coalescer.defaultPastLimit, minimumInterval: Duration = .zero,
                laneIdleLimit: Duration = VehicleDispatcher.defaultLaneIdleLimit,
                isCurrent: @escaping @Sendable (RecordSource) -> Bool = { _ in true },
                assignmentEpoch: @escaping @Sendable () -> UInt64? = { nil },
                settleStale: @escaping @Sendable ([PendingFix]) -> Void) {
        self.pastLimit = pastLimit
        self.minimumInterval = minimumInterval
        self.laneIdleLimit = laneIdleLimit
        self.nextSweep = .now + laneIdleLimit
        self.isCurrent = isCurrent
        self.assignmentEpoch = assignmentEpoch
        self.settleStale = settleStale
    }

    public static let defaultLaneIdleLimit = Duration.seconds(300)

    public var vehicleCount: Int { lanes.count }

    public var queuedFixes: Int { lanes.values.reduce(0) { $0 + $1.queued.count } }

    /// Vehicles with a request ready to be taken.
    public var readyVehicles: Int { ready.count - readyHead }

    public func submit(_ fixes: [PendingFix], now: ContinuousClock.Instant = .now) {
        for fix in fixes {
            let vehicle = fix.update.vehicle
            lanes[vehicle, default: Lane(lastActive: now)].take(fix, at: now)
            markReadyIfIdle(vehicle)
        }
        serveWaiters()
    }

    /// The next request to send, or nil once intake is closed and nothing is left.
    public func nextRequest() async -> CoalescedRequest? {
        if let request = takeReadyRequest() { return request }
        if isDrained { return nil }
        return await withCheckedContinuation { waiters.append($0) }
    }

    /// Frees the vehicle for its next request. `newestKnownMilliseconds` is the newest
    /// location time Fleet Engine is known to hold after the request (what it accepted,
    /// or its live location); `liveChecked` says the live-location check was done.
    public func complete(_ request: CoalescedRequest, newestKnownMilliseconds: Int64?, liveChecked: Bool) {
        let vehicle = request.update.vehicle
        inFlight -= 1
        if var lane = lanes[vehicle] {
            lane.inFlight = false
            lane.lastActive = .now
            if let newest = newestKnownMilliseconds {
                lane.newestAcceptedMilliseconds = max(lane.newestAcceptedMilliseconds ?? .min, newest)
            }
            if liveChecked, let epoch = request.liveCheckEpoch { lane.verifiedEpoch = epoch }
            lane.tokenAttempts = 0
            lane.awaitingTokenSince = nil
            lanes[vehicle] = lane
        }
        markReadyIfIdle(vehicle)
        serveWaiters()
    }

    /// Puts an unsent request's fixes back into its lane to try again after `delay`
    /// (no token could be had for the vehicle); newer fixes that arrive meanwhile
    /// join them in the next request.
    public func retryLater(_ request: CoalescedRequest, after delay: Duration, now: ContinuousClock.Instant = .now) {
        let vehicle = request.update.vehicle
        inFlight -= 1
        if var lane = lanes[vehicle], !intakeClosed {
            lane.inFlight = false
            lane.queued = request.carried + [request.newest] + lane.queued
            lane.tokenAttempts = request.tokenAttempts + 1
            lane.awaitingTokenSince = request.awaitingTokenSince ?? now
            lane.isDeferred = true
            lanes[vehicle] = lane
            deferred.insert(vehicle, due: now + delay)
        } else {
            lanes[vehicle]?.inFlight = false
        }
        serveWaiters()
    }

    /// Makes vehicles whose minimum interval has passed ready again, and now and then
    /// forgets vehicles idle for longer than the lane idle limit.
    public func releaseDeferred(now: ContinuousClock.Instant = .now) {
        while let vehicle = deferred.popDue(now: now) {
            lanes[vehicle]?.isDeferred = false
            markReadyIfIdle(vehicle, now: now)
        }
        serveWaiters()
        if now >= nextSweep { removeIdleLanes(now: now) }
    }

    /// One pass over every lane, at most twice per idle limit: the cost stays a small
    /// fraction of the work the lanes did meanwhile.
    private func removeIdleLanes(now: ContinuousClock.Instant) {
        nextSweep = now + laneIdleLimit / 2
        lanes = lanes.filter { _, lane in !lane.isIdle || now - lane.lastActive < laneIdleLimit }
    }

    /// Stops intake for good: drops everything queued (left uncommitted, so it is
    /// consumed again after a restart) and releases idle workers once the requests
    /// in flight complete.
    public func abandonQueued() {
        intakeClosed = true
        for vehicle in lanes.keys {
            lanes[vehicle]?.queued = []
            lanes[vehicle]?.isReady = false
        }
        ready = []
        readyHead = 0
        deferred = DueHeap()
        serveWaiters()
    }

    private var isDrained: Bool {
        intakeClosed && inFlight == 0 && readyHead == ready.count && deferred.isEmpty
    }

    private func markReadyIfIdle(_ vehicle: VehicleIdentity, now: ContinuousClock.Instant = .now) {
        guard let lane = lanes[vehicle], !lane.inFlight, !lane.isReady, !lane.isDeferred, !lane.queued.isEmpty else { return }
        if minimumInterval > .zero, let lastSentAt = lane.lastSentAt, now < lastSentAt + minimumInterval {
            lanes[vehicle]!.isDeferred = true
            deferred.insert(vehicle, due: lastSentAt + minimumInterval)
            return
        }
        lanes[vehicle]!.isReady = true
        ready.append(vehicle)
    }

    private func takeReadyRequest() -> CoalescedRequest? {
        while readyHead < ready.count {
            let vehicle = ready[readyHead]
            readyHead += 1
            if readyHead > 1024, readyHead * 2 > ready.count {
                ready.removeFirst(readyHead)
                readyHead = 0
            }
            guard var lane = lanes[vehicle] else { continue }
            lane.isReady = false
            let coalesced = Coalescer.coalesce(
                vehicle: vehicle, fixes: lane.queued.filter { isCurrent($0.source) },
                newestAcceptedMilliseconds: lane.newestAcceptedMilliseconds, pastLimit: pastLimit)
            let (request, stale) = (coalesced.request, coalesced.stale)
            lane.queued = coalesced.later
            lane.inFlight = request != nil
            if request != nil { lane.lastSentAt = .now }
            lanes[vehicle] = lane
            if !stale.isEmpty { settleStale(stale) }
            if var request {
                if let epoch = assignmentEpoch(), lane.verifiedEpoch != epoch { request.liveCheckEpoch = epoch }
                request.tokenAttempts = lane.tokenAttempts
                request.awaitingTokenSince = lane.awaitingTokenSince
                inFlight += 1
                return request
            }
        }
        return nil
    }

    private func serveWaiters() {
        while !waiters.isEmpty {
            if let request = takeReadyRequest() {
                waiters.removeFirst().resume(returning: request)
            } else if isDrained {
                waiters.forEach { $0.resume(returning: nil) }
                waiters = []
            } else {
                return
            }
        }
    }
}
