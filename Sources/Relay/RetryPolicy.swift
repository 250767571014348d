/// Exponential backoff with full jitter (AWS Architecture Blog, "Exponential
/// Backoff and Jitter"): the wait before retry n is uniform in [0, min(max, initial·2ⁿ)].
/// A server's `Retry-After` wins when it asks for longer.
public struct RetryPolicy: Sendable {
    public var initialDelay: Duration
    public var maximumDelay: Duration

    public init(initialDelay: Duration = .milliseconds(200), maximumDelay: Duration = .seconds(10)) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// The delay before retry number `attempt` (0 for the first retry).
    public func delay(attempt: Int, retryAfterSeconds: Double? = nil,
                      random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) -> Duration {
        let ceiling = min(maximumDelay.inSeconds, initialDelay.inSeconds * pow2(min(attempt, 30)))
        let jittered = random(0...ceiling)
        let wait = max(jittered, retryAfterSeconds ?? 0)
        return .milliseconds(Int64((wait * 1000).rounded()))
    }

    private func pow2(_ exponent: Int) -> Double { Double(1 << exponent) }
}
