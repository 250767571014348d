/// Requests per second at most, as a token bucket holding a twentieth of a second's worth (at
/// least one), so that the rate holds over any stretch longer than that. It paces both the
/// ceiling an operator sets (`--max-requests-per-second`, a replay's `--rate`) and the rate
/// learnt from Fleet Engine's 429s; the rate may change between two requests.
///
/// An attempt costs one token per request it makes (a live-location read and an update: two).
/// It may start once a whole token is there and pays its full cost, leaving a debt the next
/// attempts wait out: an attempt is never split, and the rate still holds on average. What an
/// attempt did not send (a read that found the update stale) is handed back when it ends.
///
/// A value the pipeline's state machine owns: an attempt waits for the moment a token accrues
/// as one of its deadlines, not in a sleeping task.
public struct RequestBudget: Sendable {
    public private(set) var rate: Double
    private var tokens: Double
    /// A `Moment`, like every time the pipeline's state holds: see `StoredAsMoment`.
    private var refilledAt: Moment

    public init(rate: Double, now: ContinuousClock.Instant) {
        precondition(rate > 0)
        self.rate = rate
        self.tokens = Self.burst(at: rate)
        self.refilledAt = Moment(now)
    }

    /// Whether an attempt may start now: a whole token is there.
    public mutating func hasToken(now: ContinuousClock.Instant) -> Bool {
        refill(now: now)
        return tokens >= 1 - Self.rounding
    }

    /// Takes a token when one is there, paying `cost` tokens (the excess as a debt).
    public mutating func take(cost: Int = 1, now: ContinuousClock.Instant) -> Bool {
        guard hasToken(now: now) else { return false }
        tokens -= Double(cost)
        return true
    }

    /// Tokens paid for requests that were not made (positive), or owed for requests made beyond
    /// what was paid (negative, a request sent again with a fresh token).
    public mutating func settle(unused: Int, now: ContinuousClock.Instant) {
        refill(now: now)
        tokens = min(Self.burst(at: rate), tokens + Double(unused))
    }

    /// Paces at `rate` from now on; tokens accrued until now at the old one.
    public mutating func setRate(_ rate: Double, now: ContinuousClock.Instant) {
        precondition(rate > 0)
        guard rate != self.rate else { return }
        refill(now: now)
        self.rate = rate
        tokens = min(Self.burst(at: rate), tokens)
    }

    /// When the next whole token will be there.
    public func nextToken(now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        let missing = 1 - tokens - (Moment(now) - refilledAt) / .seconds(1) * rate
        return missing <= 0 ? now : now + .seconds(missing / rate)
    }

    /// Fractions of a token lost to floating-point sums of elapsed times.
    private static let rounding = 1e-9

    private static func burst(at rate: Double) -> Double { max(1, rate / 20) }

    /// Accrues the tokens since the last refill; an earlier instant (a caller's clock read before
    /// another's) accrues nothing.
    private mutating func refill(now: ContinuousClock.Instant) {
        let now = Moment(now)
        guard now > refilledAt else { return }
        tokens = min(Self.burst(at: rate), tokens + (now - refilledAt) / .seconds(1) * rate)
        refilledAt = now
    }
}
