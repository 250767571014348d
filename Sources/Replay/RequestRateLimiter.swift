/// A token bucket for Fleet Engine update requests (`--rate`). A 429 halves the
/// current rate; it then recovers by a tenth of the configured rate per second, so
/// the replay settles below the quota it ran into instead of hammering it.
public actor RequestRateLimiter {
    public let configuredRate: Double
    public private(set) var currentRate: Double
    private let burst: Double
    private var tokens: Double
    private var refilledAt: ContinuousClock.Instant
    private var recoveredAt: ContinuousClock.Instant

    /// - Parameter rate: requests per second. The bucket holds a twentieth of a second's
    ///   worth (at least one), so the rate holds over any stretch longer than that.
    public init(rate: Double) {
        precondition(rate > 0)
        configuredRate = rate
        currentRate = rate
        burst = max(1, rate / 20)
        tokens = burst
        refilledAt = .now
        recoveredAt = .now
    }

    /// Waits until a request may be sent.
    public func acquire() async throws {
        while true {
            refill()
            if tokens >= 1 {
                tokens -= 1
                return
            }
            try await Task.sleep(for: .seconds((1 - tokens) / currentRate))
        }
    }

    /// Fleet Engine answered 429.
    public func throttled() {
        refill()
        currentRate = max(configuredRate / 64, currentRate / 2)
        recoveredAt = .now
    }

    private func refill() {
        let now = ContinuousClock.now
        let recovery = (now - recoveredAt) / .seconds(1)
        if currentRate < configuredRate, recovery >= 1 {
            currentRate = min(configuredRate, currentRate + configuredRate / 10 * recovery.rounded(.down))
            recoveredAt = now
        }
        tokens = min(burst, tokens + (now - refilledAt) / .seconds(1) * currentRate)
        refilledAt = now
    }
}
