import Egress
import FleetAuth
import FleetEngine
import FleetModel
import Logging
import Metrics

/// A failure that says nothing about whether the update would be accepted: the vehicle is
/// tried again after a backoff, and its newer fixes join that try.
public struct TransientFailure: Sendable, Equatable {
    public var cause: FailureCause
    public var detail: String
    /// The server's `Retry-After`, the least the backoff waits.
    public var retryAfterSeconds: Double?

    public init(cause: FailureCause, detail: String, retryAfterSeconds: Double? = nil) {
        self.cause = cause
        self.detail = detail
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// Fleet Engine failed, not the signer: counts toward Fleet Engine's share of failing vehicles.
    public var isFleetEngine: Bool { cause != .signer }

    /// Fleet Engine throttled the project (its quota), rather than failing.
    public var isThrottle: Bool { cause == .throttled }
}

/// How a request ended for its records.
public enum DeliveryOutcome: Sendable, Equatable {
    case accepted
    /// Fleet Engine already holds a location at least as new: nothing was sent.
    case stale
    /// Fleet Engine refused it for good: dead-letter the records for it.
    case rejected(FleetEngineRefusal, detail: String)
    /// Shutdown interrupted it, or its partitions are being revoked: leave the records
    /// unfinished (consumed again by whoever owns them next).
    case abandoned
    /// No token, no answer, or an answer worth retrying: try again after a backoff.
    case retry(TransientFailure)

    /// Fleet Engine answered 429: the project's quota.
    public var isThrottle: Bool {
        if case .retry(let failure) = self { failure.isThrottle } else { false }
    }
}

/// The outcome of a delivery and what it learnt about Fleet Engine's state.
public struct Delivery: Sendable, Equatable {
    public var outcome: DeliveryOutcome
    /// The newest location time Fleet Engine holds for the vehicle, as far as known.
    public var newestKnownMilliseconds: Int64?
    /// Whether Fleet Engine's live location was read.
    public var liveChecked: Bool
    /// Past locations left out of the update sent: not newer than the live location read.
    public var pastLocationsOlderThanLive = 0
    /// How long Fleet Engine took to answer the attempt's last call (the update, or the live
    /// read that found the update stale); nil when none was answered.
    public var fleetEngineLatency: Duration?
    /// Requests sent to Fleet Engine (a live-location read, an update, an update sent again with
    /// a fresh token), and how many of them it answered: what the attempt spent of the quota.
    public var requestsSent = 0
    public var requestsAnswered = 0

    public init(outcome: DeliveryOutcome, newestKnownMilliseconds: Int64? = nil, liveChecked: Bool = false) {
        self.outcome = outcome
        self.newestKnownMilliseconds = newestKnownMilliseconds
        self.liveChecked = liveChecked
    }

    /// Requests the quota admitted: answered, other than with 429.
    public var requestsAdmitted: Int { max(0, requestsAnswered - (outcome.isThrottle ? 1 : 0)) }

    mutating func countRequest(answered: Bool) {
        requestsSent += 1
        if answered { requestsAnswered += 1 }
    }
}

/// Makes one attempt at an update with its vehicle's token: mint (or take the cached
/// token), read the live location when asked to, send. It never waits to retry: any
/// transient failure comes back as `.retry`, and the caller (the pipeline's state machine)
/// gives the vehicle a due time and frees the request slot at once. Only a 401/403 is
/// tried again within the attempt, once, with a freshly minted token.
///
/// Asked to, it first reads the vehicle's live location and sends nothing when Fleet
/// Engine already holds a newer fix: after a restart or a rebalance, replayed records are
/// older than what the previous owner delivered, and must not move the vehicle backwards.
public final class UpdateForwarder: Sendable {
    let client: FleetEngineClient
    let tokens: TokenCache
    let statistics: RelayStatistics
    let health: RelayHealth
    let logLimiter: LogLimiter
    let logger: Logger
    /// A replay reads the live location before every request: its counters are made once.
    private let liveCheckCounters = CounterCache<String> { Counter(label: "fleet_relay_live_checks_total", dimensions: [("result", $0)]) }
    /// The first live-location refusal of each kind per hour is logged.
    private let liveCheckNotices = LogLimiter(limit: 1, interval: .seconds(3600))

    public init(client: FleetEngineClient, tokens: TokenCache, statistics: RelayStatistics, health: RelayHealth,
                logLimiter: LogLimiter, logger: Logger) {
        self.health = health
        self.logLimiter = logLimiter
        self.client = client
        self.tokens = tokens
        self.statistics = statistics
        self.logger = logger
    }

    /// - Parameters:
    ///   - checkLiveLocation: read the vehicle's location from Fleet Engine first.
    ///   - revocations: set once a partition of the records is being revoked: nothing more is
    ///     sent then, so the revoke waits for at most the request already under way.
    ///   - refused: the attempt so far, when `start` began it and Fleet Engine refused its
    ///     token: a fresh one is minted for it, and not again.
    ///   - resent: `start` sent the update, and the server certainly did not process it (a
    ///     connection going away): the first send here is its one resend.
    public func deliver(_ update: VehicleLocationUpdate, checkLiveLocation: Bool = false,
                        revocations: ShortList<Revocation> = ShortList(), afterRefusal refused: Delivery? = nil,
                        resent: Bool = false) async -> Delivery {
        let stillOwned = { !revocations.contains { $0.isSet } }
        var delivery = refused ?? Delivery(outcome: .abandoned, newestKnownMilliseconds: nil, liveChecked: false)
        guard var token = await token(for: update.vehicle, &delivery) else { return delivery }
        guard !Task.isCancelled, stillOwned() else { return delivery }
        var update = update
        if checkLiveLocation {
            guard await checkLive(update, token: token, &delivery) else { return delivery }
            guard !Task.isCancelled, stillOwned() else { return delivery }
            update = Self.leavingOut(olderThan: delivery.newestKnownMilliseconds, update, &delivery)
        }
        var reauthenticated = refused != nil
        var resent = resent
        while true {
            let started = ContinuousClock.now
            let response = await client.send(update, token: token, resent: resent)
            resent = false
            delivery.countRequest(answered: response.status != 0)
            if Task.isCancelled { return delivery }  // shutdown ended it: says nothing about Fleet Engine
            guard case .mintAgain = answered(response, update, token: token, startedAt: started,
                                             reauthenticated: reauthenticated, &delivery) else { return delivery }
            reauthenticated = true
            guard let fresh = await self.token(for: update.vehicle, &delivery) else { return delivery }
            guard !Task.isCancelled, stillOwned() else { return delivery }
            token = fresh
        }
    }

    /// How `start`'s attempt ended.
    public enum StartedAttempt: Sendable {
        case ended(Delivery)
        /// Fleet Engine refused the token (already dropped from the cache): `deliver` the update
        /// `afterRefusal` of this attempt so far.
        case mintAgain(Delivery)
        /// The connection went away before Fleet Engine processed the update: `deliver` it anew,
        /// `resent`.
        case resend
    }

    /// An attempt `start` began: what its answer is read with, kept by the receiver until then.
    public struct StartedCall: Sendable {
        fileprivate let call: EgressCall
        fileprivate let token: TokenText
        fileprivate let startedAt: ContinuousClock.Instant

        /// Ends the request under way, from the caller's event loop: its receiver hears a
        /// `CancellationError` (unless it ended already).
        public func cancel() {
            call.cancel()
        }
    }

    /// Begins the attempt at once when it needs no waiting: the vehicle's token ready in the
    /// cache, no live location to read, a ready HTTP/2 connection on the caller's event loop.
    /// `receiver` then hears the answer there, for `ended` to read. Returns nil without sending
    /// when the attempt needs waiting: `deliver` it.
    public func start(_ update: VehicleLocationUpdate, answerTo receiver: some EgressAnswerReceiver) -> StartedCall? {
        guard let token = tokens.readyToken(for: update.vehicle) else { return nil }
        health.recordSignerSuccess()
        let startedAt = ContinuousClock.now
        guard let call = client.start(update, token: token, answerTo: receiver) else { return nil }
        return StartedCall(call: call, token: token, startedAt: startedAt)
    }

    /// How the attempt `start` began for `update` ended, from the answer its receiver heard;
    /// `cancelled`: shutdown ended it meanwhile (the delivery says `.abandoned` then).
    public func ended(_ result: Result<EgressResponse, any Error>, of update: VehicleLocationUpdate, _ started: StartedCall,
                      cancelled: Bool) -> StartedAttempt {
        guard let response = client.startedUpdateResponse(result) else { return .resend }
        var delivery = Delivery(outcome: .abandoned, newestKnownMilliseconds: nil, liveChecked: false)
        delivery.countRequest(answered: response.status != 0)
        if cancelled { return .ended(delivery) }
        switch answered(response, update, token: started.token, startedAt: started.startedAt, reauthenticated: false, &delivery) {
        case .ended: return .ended(delivery)
        case .mintAgain: return .mintAgain(delivery)
        }
    }

    private enum AnswerStep {
        /// `delivery` says how the attempt ended.
        case ended
        /// The token was refused and dropped: mint a fresh one and send again.
        case mintAgain
    }

    /// What Fleet Engine's answer to an update means for the attempt, written into `delivery`.
    private func answered(_ response: FleetEngineClient.Response, _ update: VehicleLocationUpdate, token: some BearerToken,
                          startedAt started: ContinuousClock.Instant, reauthenticated: Bool,
                          _ delivery: inout Delivery) -> AnswerStep {
        let took = ContinuousClock.now - started
        delivery.fleetEngineLatency = took
        statistics.recordRequest(kind: update.vehicle.kind, status: response.status, duration: took)
        switch response.outcome {
        case .accepted:
            delivery.outcome = .accepted
            delivery.newestKnownMilliseconds = update.lastLocation.recordedAtMilliseconds
            return .ended
        case .unauthenticated, .permissionDenied:
            let refusal = response.outcome.refusal ?? .unauthenticated
            guard !reauthenticated else {
                delivery.outcome = .rejected(refusal, detail: Self.detail(response))
                return .ended
            }
            tokens.invalidate(update.vehicle, refused: token.text)
            statistics.recordRetry(cause: .refusedToken(refusal))
            return .mintAgain
        case .rejected(let refusal):
            delivery.outcome = .rejected(refusal, detail: Self.detail(response))
            return .ended
        case .transient(let cause, let retryAfter):
            logger.debug("Fleet Engine \(cause) for \(update.vehicle); retrying later")
            delivery.outcome = .retry(TransientFailure(cause: cause, detail: Self.detail(response),
                                                       retryAfterSeconds: retryAfter))
            statistics.recordRetry(cause: cause)
            return .ended
        }
    }

    /// The vehicle's token; nil when none could be had (`delivery` then says to retry).
    private func token(for vehicle: VehicleIdentity, _ delivery: inout Delivery) async -> String? {
        do {
            let token = try await tokens.token(for: vehicle)
            health.recordSignerSuccess()
            return token
        } catch {
            if Task.isCancelled { return nil }
            logLimiter.warning("signer", to: logger, "No token for \(vehicle): \(error)")
            health.recordSignerFailure(error as? SignerError)
            statistics.recordRetry(cause: .signer)
            delivery.outcome = .retry(TransientFailure(cause: .signer, detail: "\(error)"))
            return nil
        }
    }

    /// The update without the past locations Fleet Engine already holds newer than: a history
    /// (a replay's) whose newest fix is newer than the live location sends only what follows it.
    private static func leavingOut(olderThan live: Int64?, _ update: VehicleLocationUpdate,
                                   _ delivery: inout Delivery) -> VehicleLocationUpdate {
        guard let live, let oldest = update.pastLocations.first?.recordedAtMilliseconds, oldest <= live else { return update }
        let newer = update.pastLocations.filter { $0.recordedAtMilliseconds > live }
        delivery.pastLocationsOlderThanLive = update.pastLocations.count - newer.count
        return VehicleLocationUpdate(vehicle: update.vehicle, lastLocation: update.lastLocation, pastLocations: newer)
    }

    /// Reads the live location; false when the attempt ends here (`delivery` says how).
    private func checkLive(_ update: VehicleLocationUpdate, token: String, _ delivery: inout Delivery) async -> Bool {
        let started = ContinuousClock.now
        let live = await liveLocation(of: update.vehicle, token: token)
        delivery.countRequest(answered: live.wasAnswered)
        if Task.isCancelled { return false }
        delivery.fleetEngineLatency = .now - started
        countLiveCheck(live, update)
        switch live {
        case .known(let live):
            delivery.liveChecked = true
            delivery.newestKnownMilliseconds = live
            if let live, live >= update.lastLocation.recordedAtMilliseconds {
                delivery.outcome = .stale
                return false
            }
            return true
        case .refused:
            delivery.liveChecked = true  // the update itself will say what is wrong
            return true
        case .unavailable(let cause, let detail):
            statistics.recordRetry(cause: cause)
            delivery.outcome = .retry(TransientFailure(cause: cause, detail: detail))
            return false
        }
    }

    private enum LiveLocationResult {
        /// Fleet Engine answered; nil when the vehicle has no location yet.
        case known(Int64?)
        /// Fleet Engine refused to say: the update's own answer decides.
        case refused(LiveReadRefusal, message: String)
        /// Cause and detail: worth retrying.
        case unavailable(FailureCause, String)

        var wasAnswered: Bool {
            if case .unavailable(.transport, _) = self { false } else { true }
        }
    }

    /// Why Fleet Engine would not tell a vehicle's live location, named as in the metric.
    /// Raw values are the HTTP statuses of the read.
    private enum LiveReadRefusal: Int {
        case invalidArgument = 400
        case unauthenticated = 401
        case permissionDenied = 403
        case notFound = 404

        var label: String {
            switch self {
            case .invalidArgument: "invalid_argument"
            case .unauthenticated: "unauthenticated"
            case .permissionDenied: "permission_denied"
            case .notFound: "not_found"
            }
        }

        /// Whether the update goes out without the never-backwards check: a vehicle Fleet Engine
        /// does not know has no location to move back from.
        var turnsTheCheckOff: Bool { self != .notFound }
    }

    private func liveLocation(of vehicle: VehicleIdentity, token: String) async -> LiveLocationResult {
        let fetched = await client.fetchVehicle(vehicle, token: token)
        if fetched.status == 200 { return .known(fetched.locationMilliseconds) }
        if let refusal = LiveReadRefusal(rawValue: fetched.status) {
            return .refused(refusal, message: fetched.message)
        }
        if fetched.status == 0 {
            return .unavailable(.transport(fetched.failure?.cause ?? .connection), fetched.failure?.message ?? "no answer")
        }
        return .unavailable(.status(fetched.status), "Fleet Engine answered \(fetched.status)")
    }

    /// Counts each live-location read by result (`fleet_relay_live_checks_total`) and logs the first
    /// refusal of each kind an hour that leaves the update unchecked: while Fleet Engine refuses the
    /// read, updates go out without the never-backwards check, and an operator must be able to see that.
    private func countLiveCheck(_ result: LiveLocationResult, _ update: VehicleLocationUpdate) {
        let label: String
        switch result {
        case .known(nil): label = "no_location"
        case .known(let live?): label = live >= update.lastLocation.recordedAtMilliseconds ? "newer" : "older"
        case .unavailable: label = "unavailable"
        case .refused(let refusal, let message):
            label = refusal.label
            if refusal.turnsTheCheckOff {
                liveCheckNotices.warning(label, to: logger, "Fleet Engine refused to read the live location of \(update.vehicle) (\(refusal.rawValue): \(message)); its update is sent without the check that keeps vehicles from moving back in time. Refusals are counted in fleet_relay_live_checks_total{result=\"\(label)\"}")
            }
        }
        liveCheckCounters.counter(for: label).increment()
    }

    private static func detail(_ response: FleetEngineClient.Response) -> String {
        response.status == 0 ? response.message : "Fleet Engine answered \(response.status): \(response.message)"
    }
}
