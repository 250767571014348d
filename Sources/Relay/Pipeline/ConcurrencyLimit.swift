/// How many attempts may be under way at once, adapted to what Fleet Engine sustains, as
/// Vector's adaptive request concurrency does after Netflix's concurrency-limits: additive
/// increase while attempts succeed at their usual latency, multiplicative decrease when Fleet
/// Engine is overloaded or its latency climbs well above its baseline.
///
/// A 429 is no signal here: the project's quota is a rate, learnt as one (`LearnedRate`).
/// Overload is told apart from one vehicle refused: 503s, timeouts and connection failures
/// count only when most attempts of a round end that way (and the pipeline reports them only
/// while Fleet Engine fails for most vehicles it holds); a few vehicles Fleet Engine keeps
/// refusing, retried at their backoff's pace, never shrink the limit.
///
/// A value: the pipeline's state machine owns it and feeds it every attempt's end.
public struct ConcurrencyLimit: Sendable {
    public struct Settings: Sendable, Equatable {
        /// The limit's ceiling (`--max-in-flight`) and where it starts.
        public var maximum: Int
        public var minimum = 1
        /// What a decrease keeps of the limit.
        public var decrease = 0.9
        /// Latency this many times its baseline counts as Fleet Engine slowing down.
        public var latencyTolerance = 2.5
        /// A round's share of overloaded attempts (503, timeout, connection) that counts as overload.
        public var overloadShare = 0.5
        /// Overload is over once this long passed without a decrease's cause.
        public var quietPeriod = Duration.seconds(10)

        public init(maximum: Int) {
            self.maximum = max(1, maximum)
        }
    }

    /// How an attempt ended, as far as the limit cares.
    public enum Signal: Sendable, Equatable {
        /// Fleet Engine answered the attempt, after this long (its update's latency).
        case answered(latency: Duration)
        /// 503, a timeout or a connection failure: overload when most attempts end this way.
        case overloaded
        /// Ended without saying anything about Fleet Engine's capacity (signer failure, abandoned).
        case neutral
    }

    /// What made the limit fall; the raw value is what the log line names.
    public enum DecreaseCause: String, Sendable {
        /// Answers grew slower than the baseline.
        case latency
        /// Most attempts of a round ended in a 503, a timeout or a connection failure.
        case overloaded
    }

    /// Overload began or ended (logged once each way).
    public enum Change: Sendable, Equatable {
        case overloadBegan(limit: Int, cause: DecreaseCause)
        case overloadEnded(lasted: Duration, limit: Int)
    }

    public let settings: Settings
    /// Fractional, so that one success adds 1/limit: one whole step per round of attempts.
    private var window: Double
    // Times as `Moment`s: the limit is copied out and back at every attempt's end, and a
    // `ContinuousClock.Instant` (resilient) would make each copy a call through value witnesses.
    private var lastDecrease: Moment?
    /// Slow and fast moving averages of answered latency, in seconds.
    private var baselineLatency: Double?
    private var recentLatency: Double?
    private var answeredSamples = 0
    /// Attempts and overloaded ones in the current round (about `limit` attempts).
    private var roundAttempts = 0
    private var roundOverloaded = 0
    private var lastDecreaseCause: Moment?
    private var overloadSince: Moment?

    public init(settings: Settings) {
        self.settings = settings
        self.window = Double(settings.maximum)
    }

    /// Attempts that may be under way now.
    public var limit: Int { max(settings.minimum, min(settings.maximum, Int(window))) }

    public var isOverloaded: Bool { overloadSince != nil }

    /// An attempt that started at `startedAt` ended. `saturated`: the limit was reached while it
    /// was under way; only then does a success show that more would be sustained.
    public mutating func record(_ signal: Signal, startedAt: ContinuousClock.Instant, saturated: Bool,
                                now: ContinuousClock.Instant) -> Change? {
        let (startedAt, now) = (Moment(startedAt), Moment(now))
        var change: Change?
        let overloadedRound = signal != .neutral && countRound(overloaded: signal == .overloaded)
        switch signal {
        case .answered(let latency):
            if learn(latency) {
                change = decrease(startedAt: startedAt, now: now, cause: .latency)
            } else if overloadedRound {
                change = decrease(startedAt: startedAt, now: now, cause: .overloaded)
            } else if saturated, lastDecrease.map({ startedAt > $0 }) ?? true {
                window = min(Double(settings.maximum), window + 1 / window)
            }
        case .overloaded:
            if overloadedRound { change = decrease(startedAt: startedAt, now: now, cause: .overloaded) }
        case .neutral:
            break
        }
        return change ?? endOverloadIfQuiet(now: now)
    }

    /// Multiplicative decrease, at most once per round: attempts that started before the last
    /// decrease were sent at the old limit and say nothing about the new one.
    private mutating func decrease(startedAt: Moment, now: Moment, cause: DecreaseCause) -> Change? {
        lastDecreaseCause = now
        if let lastDecrease, startedAt <= lastDecrease { return nil }
        lastDecrease = now
        window = max(Double(settings.minimum), window * settings.decrease)
        guard overloadSince == nil else { return nil }
        overloadSince = now
        return .overloadBegan(limit: limit, cause: cause)
    }

    private func recentlyOverloaded(now: Moment) -> Bool {
        lastDecreaseCause.map { now - $0 < settings.quietPeriod } ?? false
    }

    private mutating func endOverloadIfQuiet(now: Moment) -> Change? {
        guard let since = overloadSince, !recentlyOverloaded(now: now) else { return nil }
        overloadSince = nil
        return .overloadEnded(lasted: now - since, limit: limit)
    }

    /// Counts an attempt in the round; true when the round ended mostly overloaded.
    private mutating func countRound(overloaded: Bool) -> Bool {
        roundAttempts += 1
        if overloaded { roundOverloaded += 1 }
        guard roundAttempts >= max(limit, 8) else { return false }
        let overloaded = Double(roundOverloaded) >= Double(roundAttempts) * settings.overloadShare
        (roundAttempts, roundOverloaded) = (0, 0)
        return overloaded
    }

    /// Folds an answered latency into the averages; true when the recent one climbed well
    /// above the baseline (after enough samples for a baseline to mean something).
    private mutating func learn(_ latency: Duration) -> Bool {
        let seconds = Double(latency.components.seconds) + Double(latency.components.attoseconds) / 1e18
        answeredSamples += 1
        baselineLatency = baselineLatency.map { $0 + (seconds - $0) / 500 } ?? seconds
        recentLatency = recentLatency.map { $0 + (seconds - $0) / 20 } ?? seconds
        guard answeredSamples >= 100, let baseline = baselineLatency, let recent = recentLatency else { return false }
        return recent > baseline * settings.latencyTolerance
    }
}
