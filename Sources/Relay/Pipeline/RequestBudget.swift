/// A ceiling on attempts per second (`--max-requests-per-second`, a replay's `--rate`), as a
/// token bucket holding a twentieth of a second's worth (at least one), so that the rate holds
/// over any stretch longer than that. A value the pipeline's state machine owns: an attempt
/// waits for the moment a token accrues as one of its deadlines, not in a sleeping task.
public struct RequestBudget: Sendable {
    public let rate: Double
    private let burst: Double
    private var tokens: Double
    private var refilledAt: ContinuousClock.Instant

    public init(rate: Double, now: ContinuousClock.Instant) {
        precondition(rate > 0)
        self.rate = rate
        self.burst = max(1, rate / 20)
        self.tokens = burst
        self.refilledAt = now
    }

    /// Takes a token when one is there.
    public mutating func take(now: ContinuousClock.Instant) -> Bool {
        refill(now: now)
        guard tokens >= 1 - Self.rounding else { return false }
        tokens -= 1
        return true
    }

    /// When the next token will be there.
    public func nextToken(now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        let missing = 1 - tokens - (now - refilledAt) / .seconds(1) * rate
        return missing <= 0 ? now : now + .seconds(missing / rate)
    }

    /// Fractions of a token lost to floating-point sums of elapsed times.
    private static let rounding = 1e-9

    private mutating func refill(now: ContinuousClock.Instant) {
        tokens = min(burst, tokens + (now - refilledAt) / .seconds(1) * rate)
        refilledAt = now
    }
}
