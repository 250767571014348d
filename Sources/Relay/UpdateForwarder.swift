import FleetAuth
import FleetEngine
import Logging
import Metrics

/// How a request ended for its records.
public enum DeliveryOutcome: Sendable, Equatable {
    case accepted
    /// Fleet Engine already holds a location at least as new: nothing was sent.
    case stale
    /// Fleet Engine refused it for good: dead-letter the records with this reason.
    case rejected(reason: String, detail: String)
    /// Shutdown interrupted it, or its partitions moved to another consumer: leave
    /// the records unfinished (consumed again by whoever owns them next).
    case abandoned
    /// No token could be had (the signer is failing): nothing was sent; try again later.
    case awaitingToken
}

/// The outcome of a delivery and what it learnt about Fleet Engine's state.
public struct Delivery: Sendable, Equatable {
    public var outcome: DeliveryOutcome
    /// The newest location time Fleet Engine holds for the vehicle, as far as known.
    public var newestKnownMilliseconds: Int64?
    /// Whether Fleet Engine's live location was read.
    public var liveChecked: Bool

    public init(outcome: DeliveryOutcome, newestKnownMilliseconds: Int64? = nil, liveChecked: Bool = false) {
        self.outcome = outcome
        self.newestKnownMilliseconds = newestKnownMilliseconds
        self.liveChecked = liveChecked
    }
}

/// Sends one update with its vehicle's token, retrying transient failures with
/// backoff for as long as the task runs (Fleet Engine being down is no reason to
/// drop data) and re-minting once on 401/403. When no token can be had it returns
/// at once (`awaitingToken`): the caller retries later without holding a worker. Asked to, it first reads the
/// vehicle's live location and sends nothing when Fleet Engine already holds a
/// newer fix: after a restart or a rebalance, replayed records are older than
/// what the previous owner delivered, and must not move the vehicle backwards.
public struct UpdateForwarder: Sendable {
    let client: FleetEngineClient
    let tokens: TokenCache
    let retryPolicy: RetryPolicy
    let retryDeadline: Duration?
    let statistics: RelayStatistics
    let health: RelayHealth
    let logLimiter: LogLimiter
    let logger: Logger
    let observeResponse: @Sendable (FleetEngineOutcome) -> Void
    /// The first live-location refusal of each kind per hour is logged.
    private let liveCheckNotices = LogLimiter(limit: 1, interval: .seconds(3600))

    /// - Parameter observeResponse: sees every update response's outcome (a replay slows down on 429s).
    public init(client: FleetEngineClient, tokens: TokenCache, retryPolicy: RetryPolicy, retryDeadline: Duration? = nil,
                statistics: RelayStatistics, health: RelayHealth, logLimiter: LogLimiter, logger: Logger,
                observeResponse: @escaping @Sendable (FleetEngineOutcome) -> Void = { _ in }) {
        self.observeResponse = observeResponse
        self.health = health
        self.logLimiter = logLimiter
        self.client = client
        self.tokens = tokens
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
        self.statistics = statistics
        self.logger = logger
    }

    /// - Parameters:
    ///   - checkLiveLocation: read the vehicle's location from Fleet Engine first.
    ///   - awaitingTokenSince: when earlier attempts began finding no token; counts toward the retry deadline.
    ///   - stillOwned: false once the records' partitions were revoked: retrying then
    ///     would race the new owner and could move the vehicle backwards.
    /// The dead-letter reason of records whose request kept failing past `--retry-deadline`.
    public static let retryDeadlineExceeded = "retry_deadline_exceeded"

    public func deliver(_ update: VehicleLocationUpdate, checkLiveLocation: Bool = false,
                        awaitingTokenSince: ContinuousClock.Instant? = nil,
                        stillOwned: () -> Bool = { true }) async -> Delivery {
        var delivery = Delivery(outcome: .abandoned, newestKnownMilliseconds: nil, liveChecked: !checkLiveLocation)
        var reauthenticated = false
        var attempt = 0
        let giveUpAt = retryDeadline.map { (awaitingTokenSince ?? .now) + $0 }
        var lastCause = ""
        while !Task.isCancelled, stillOwned() {
            if let giveUpAt, attempt > 0, ContinuousClock.now >= giveUpAt {
                delivery.outcome = .rejected(
                    reason: Self.retryDeadlineExceeded,
                    detail: "Gave up after \(attempt) retries within the retry deadline; last cause: \(lastCause).")
                return delivery
            }
            let token: String
            do {
                token = try await tokens.token(for: update.vehicle)
                health.recordSignerSuccess()
            } catch {
                logLimiter.warning("signer", to: logger, "No token for \(update.vehicle): \(error)")
                health.recordSignerFailure()
                statistics.recordRetry(cause: "signer")
                if let giveUpAt, awaitingTokenSince != nil, ContinuousClock.now >= giveUpAt {
                    delivery.outcome = .rejected(reason: Self.retryDeadlineExceeded,
                                                 detail: "Gave up within the retry deadline; last cause: signer: \(error).")
                } else {
                    delivery.outcome = .awaitingToken
                }
                return delivery
            }
            if !delivery.liveChecked {
                let live = await liveLocation(of: update.vehicle, token: token)
                if Task.isCancelled { break }
                countLiveCheck(live, update)
                switch live {
                case .known(let live):
                    delivery.liveChecked = true
                    delivery.newestKnownMilliseconds = live
                    if let live, live >= update.lastLocation.recordedAtMilliseconds {
                        delivery.outcome = .stale
                        return delivery
                    }
                case .refused:
                    delivery.liveChecked = true  // the update itself will say what is wrong
                case .unavailable(let cause, let detail):
                    lastCause = cause
                    health.record(.transient(cause: cause, retryAfterSeconds: nil), detail: detail)
                    guard await backOff(attempt: &attempt, retryAfter: nil, cause: cause) else { break }
                    continue
                }
            }
            let started = ContinuousClock.now
            let response = await client.send(update, token: token)
            if Task.isCancelled { break }  // a revoke or shutdown ended it: says nothing about Fleet Engine
            statistics.recordRequest(kind: update.vehicle.kind, status: response.status, duration: .now - started)
            health.record(response.outcome, detail: response.message)
            observeResponse(response.outcome)
            switch response.outcome {
            case .accepted:
                delivery.outcome = .accepted
                delivery.newestKnownMilliseconds = update.lastLocation.recordedAtMilliseconds
                return delivery
            case .unauthenticated, .permissionDenied:
                if reauthenticated {
                    delivery.outcome = .rejected(reason: response.outcome.deadLetterReason, detail: Self.detail(response))
                    return delivery
                }
                reauthenticated = true
                await tokens.invalidate(update.vehicle, refused: token)
                statistics.recordRetry(cause: response.outcome.deadLetterReason)
            case .rejected(let reason):
                delivery.outcome = .rejected(reason: reason, detail: Self.detail(response))
                return delivery
            case .transient(let cause, let retryAfter):
                logger.debug("Fleet Engine \(cause) for \(update.vehicle); retrying")
                lastCause = cause
                guard await backOff(attempt: &attempt, retryAfter: retryAfter, cause: cause) else { break }
                // While this update waited, a newer fix may have reached Fleet Engine (the live
                // relay, during a replay): read the live location again before the next attempt.
                if checkLiveLocation { delivery.liveChecked = false }
            }
        }
        delivery.outcome = .abandoned
        return delivery
    }

    private enum LiveLocationResult {
        /// Fleet Engine answered; nil when the vehicle has no location yet.
        case known(Int64?)
        /// Fleet Engine refused to say: the update's own answer decides.
        case refused(LiveReadRefusal, message: String)
        /// Cause and detail: worth retrying.
        case unavailable(String, String)
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
        if fetched.status == 200 { return .known(LiveLocation.milliseconds(fromVehicleBody: fetched.body)) }
        if let refusal = LiveReadRefusal(rawValue: fetched.status) {
            return .refused(refusal, message: fetched.message)
        }
        if fetched.status == 0 { return .unavailable(fetched.failure?.cause ?? "connection", fetched.failure?.message ?? "no answer") }
        return .unavailable("http_\(fetched.status)", "Fleet Engine answered \(fetched.status)")
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
        Counter(label: "fleet_relay_live_checks_total", dimensions: [("result", label)]).increment()
    }

    /// Sleeps before the next attempt; false when the task was cancelled meanwhile.
    private func backOff(attempt: inout Int, retryAfter: Double?, cause: String) async -> Bool {
        let delay = retryPolicy.delay(attempt: attempt, retryAfterSeconds: retryAfter)
        attempt += 1
        statistics.recordRetry(cause: cause)
        do {
            try await Task.sleep(for: delay)
            return true
        } catch {
            return false
        }
    }

    private static func detail(_ response: FleetEngineClient.Response) -> String {
        "Fleet Engine answered \(response.status): \(response.message)"
    }
}
