import FleetEngine

/// How fast the pipeline may start attempts, and whether Fleet Engine is failing for most
/// vehicles: the adaptive limit on attempts under way, the ceiling on attempts per second, and
/// outage detection. A value the pipeline owns; it never sees a vehicle, only counts.
struct Pacing {
    /// What an attempt's end changed.
    struct Adaptation {
        var limit: Int?
        var throttling: ConcurrencyLimit.Change?
    }

    private var concurrency: ConcurrencyLimit?
    private var budget: RequestBudget?
    /// When the request budget next has a token, while a ready vehicle waits for one.
    private(set) var budgetDue: ContinuousClock.Instant?
    /// Since when Fleet Engine fails for most vehicles, while it does.
    private var outageSince: ContinuousClock.Instant?

    init(concurrency: ConcurrencyLimit.Settings?, maximumRequestsPerSecond: Double?, now: ContinuousClock.Instant) {
        self.concurrency = concurrency.map(ConcurrencyLimit.init)
        self.budget = maximumRequestsPerSecond.map { RequestBudget(rate: $0, now: now) }
    }

    /// Attempts that may be under way now (the adaptive limit, else unbounded).
    var limit: Int? { concurrency?.limit }

    /// Whether the concurrency limit leaves room for one more attempt beside `underWay`.
    func hasRoom(underWay: Int) -> Bool { underWay < concurrency?.limit ?? .max }

    /// Takes a token of the request budget for an attempt about to start: nil when it got one
    /// (or there is no budget), else when the next token comes, a deadline to wait for.
    mutating func takeBudget(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard budget != nil, !budget!.take(now: now) else {
            budgetDue = nil
            return nil
        }
        let due = budget!.nextToken(now: now)
        budgetDue = due
        return due
    }

    /// The timer reached `now`: a budget deadline then due has passed.
    mutating func deadlineReached(now: ContinuousClock.Instant) {
        if let due = budgetDue, due <= now { budgetDue = nil }
    }

    /// Nothing waits for the budget any more.
    mutating func stopWaitingForBudget() {
        budgetDue = nil
    }

    /// Feeds an attempt's end to the concurrency limit: a 429 throttles; 503s and timeouts only
    /// while Fleet Engine fails for most vehicles held (`mostVehiclesFailing`: a few refused
    /// vehicles, even when they are all the traffic left, say nothing about the project) and
    /// most attempts end so; an answer's latency against its baseline.
    mutating func attemptEnded(_ outcome: DeliveryOutcome, latency: Duration?, startedAt: ContinuousClock.Instant,
                               underWay: Int, mostVehiclesFailing: Bool, now: ContinuousClock.Instant) -> Adaptation {
        guard var limit = concurrency else { return Adaptation() }
        let signal: ConcurrencyLimit.Signal = switch outcome {
        case .retry(let failure) where failure.isThrottle: .throttled
        case .retry(let failure) where failure.isFleetEngine && mostVehiclesFailing: .overloaded
        case .retry, .abandoned: .neutral
        case .accepted, .stale, .rejected: latency.map { .answered(latency: $0) } ?? .neutral
        }
        let before = limit.limit
        var adaptation = Adaptation()
        adaptation.throttling = limit.record(signal, startedAt: startedAt, saturated: underWay >= before, now: now)
        if limit.limit != before { adaptation.limit = limit.limit }
        concurrency = limit
        return adaptation
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
    /// and 503s count as the project being throttled.
    static func mostFailing(_ failing: Int, of vehicles: Int) -> Bool { failing * 2 > vehicles }
}
