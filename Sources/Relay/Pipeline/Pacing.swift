import FleetEngine

/// How fast the pipeline may start attempts, and whether Fleet Engine is failing for most
/// vehicles: the adaptive limit on attempts under way, the rate learnt from Fleet Engine's 429s
/// under the operator's ceiling on requests per second, and outage detection. A value the
/// pipeline owns; it never sees a vehicle, only counts.
struct Pacing {
    /// What an attempt's end changed.
    struct Adaptation {
        var limit: Int?
        var overload: ConcurrencyLimit.Change?
        var pacing: LearnedRate.Change?
        /// The learnt rate, when it moved by more than a hundredth since last reported (0: not pacing).
        var learnedRate: Double?
    }

    private var concurrency: ConcurrencyLimit?
    private var learned: LearnedRate?
    private let ceiling: Double?
    /// Paces at the lower of the ceiling and the learnt rate; nil while neither paces.
    private var budget: RequestBudget?
    /// When the request budget next has a token, while a ready vehicle waits for one.
    @StoredAsMoment private(set) var budgetDue: ContinuousClock.Instant? = nil
    /// The learnt rate last reported (0: not pacing).
    private var reportedRate = 0.0
    /// Since when Fleet Engine fails for most vehicles, while it does.
    @StoredAsMoment private var outageSince: ContinuousClock.Instant? = nil

    init(concurrency: ConcurrencyLimit.Settings?, learnedRate: LearnedRate.Settings?, maximumRequestsPerSecond: Double?,
         now: ContinuousClock.Instant) {
        self.concurrency = concurrency.map(ConcurrencyLimit.init)
        self.learned = learnedRate.map { LearnedRate(settings: $0, now: now) }
        self.ceiling = maximumRequestsPerSecond
        self.budget = maximumRequestsPerSecond.map { RequestBudget(rate: $0, now: now) }
    }

    /// Attempts that may be under way now (the adaptive limit, else unbounded).
    var limit: Int? { concurrency?.limit }

    /// Requests per second learnt from Fleet Engine's 429s; nil while not pacing.
    func learnedRate(now: ContinuousClock.Instant) -> Double? { learned?.rate(now: now) }

    /// Whether the concurrency limit leaves room for one more attempt beside `underWay`.
    func hasRoom(underWay: Int) -> Bool { underWay < concurrency?.limit ?? .max }

    /// Whether an attempt may start now: nil when the rate has a token for it (or nothing
    /// paces), else when the next token comes, a deadline to wait for.
    mutating func waitForToken(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        updateBudgetRate(now: now)
        guard budget != nil, !budget!.hasToken(now: now) else {
            budgetDue = nil
            return nil
        }
        learned?.held(now: now)
        let due = budget!.nextToken(now: now)
        budgetDue = due
        return due
    }

    /// An attempt starts: it pays a token per request it may make.
    mutating func spend(requests: Int, now: ContinuousClock.Instant) {
        _ = budget?.take(cost: requests, now: now)
    }

    /// The timer reached `now`: a budget deadline then due has passed.
    mutating func deadlineReached(now: ContinuousClock.Instant) {
        if let due = budgetDue, due <= now { budgetDue = nil }
    }

    /// Nothing waits for the budget any more.
    mutating func stopWaitingForBudget() {
        budgetDue = nil
    }

    /// Follows the learnt rate as it grows: the budget paces at the lower of it and the ceiling.
    private mutating func updateBudgetRate(now: ContinuousClock.Instant) {
        // Called before every attempt: no array of candidates, just the lower of the two.
        let learnt = learned?.rate(now: now)
        guard let rate = learnt.map({ min($0, ceiling ?? $0) }) ?? ceiling else {
            budget = nil
            return
        }
        if budget == nil {
            budget = RequestBudget(rate: rate, now: now)
        } else {
            budget!.setRate(rate, now: now)
        }
    }

    /// Feeds an attempt's end to the learnt rate and the concurrency limit, and settles the
    /// tokens it paid at its start (`charged`) against the requests it made.
    ///
    /// A 429 is the project's quota, a rate: only the learnt rate answers it. The concurrency
    /// limit follows Fleet Engine's capacity: 503s and timeouts only while Fleet Engine fails
    /// for most vehicles held (`mostVehiclesFailing`: a few refused vehicles, even when they are
    /// all the traffic left, say nothing about the project) and most attempts end so; an
    /// answer's latency against its baseline.
    mutating func attemptEnded(_ delivery: Delivery, charged: Int, startedAt: ContinuousClock.Instant,
                               underWay: Int, mostVehiclesFailing: Bool, now: ContinuousClock.Instant) -> Adaptation {
        var adaptation = Adaptation()
        if charged != delivery.requestsSent { budget?.settle(unused: charged - delivery.requestsSent, now: now) }
        let throttled = delivery.outcome.isThrottle
        // Optional chaining mutates the learnt rate in place; a test against nil would copy it.
        adaptation.pacing = learned?.attemptEnded(admitted: delivery.requestsAdmitted, throttled: throttled,
                                                  startedAt: startedAt, now: now) ?? nil
        adaptation.learnedRate = reportRate(now: now)
        guard var limit = concurrency else { return adaptation }
        let signal: ConcurrencyLimit.Signal = switch delivery.outcome {
        case .retry(let failure) where failure.isFleetEngine && !failure.isThrottle && mostVehiclesFailing: .overloaded
        case .retry, .abandoned: .neutral
        case .accepted, .stale, .rejected: delivery.fleetEngineLatency.map { .answered(latency: $0) } ?? .neutral
        }
        let before = limit.limit
        adaptation.overload = limit.record(signal, startedAt: startedAt, saturated: underWay >= before, now: now)
        if limit.limit != before { adaptation.limit = limit.limit }
        concurrency = limit
        return adaptation
    }

    /// The learnt rate when it moved by more than a hundredth since last reported: a gauge need
    /// not follow every answer.
    private mutating func reportRate(now: ContinuousClock.Instant) -> Double? {
        let rate = learned?.rate(now: now) ?? 0
        guard abs(rate - reportedRate) > reportedRate / 100 || (rate == 0) != (reportedRate == 0) else { return nil }
        reportedRate = rate
        return rate
    }

    /// Begins an outage when more than half the vehicles held wait after a Fleet Engine
    /// failure, and ends it once at most a third do: a few vehicles Fleet Engine keeps
    /// refusing are no outage, and the report does not flap with each answer.
    mutating func updateOutage(failing: Int, vehicles: Int, failure: TransientFailure?,
                               now: ContinuousClock.Instant) -> FleetEngineOutageChange? {
        if let since = outageSince {
            guard failing * 3 <= vehicles else { return nil }
            outageSince = nil
            return .ended(lasted: now - since)
        }
        guard let failure, failure.isFleetEngine, Self.mostFailing(failing, of: vehicles) else { return nil }
        outageSince = now
        return .began(failingVehicles: failing, vehicles: vehicles, failure: failure)
    }

    /// More than half the vehicles held wait to retry after a Fleet Engine failure: an outage,
    /// and 503s count as Fleet Engine overloaded.
    static func mostFailing(_ failing: Int, of vehicles: Int) -> Bool { failing * 2 > vehicles }
}
