import Synchronization

/// A token bucket for Fleet Engine update requests (`--rate`). A 429 halves the
/// current rate; it then recovers by a tenth of the configured rate per second, so
/// the replay settles below the quota it ran into instead of hammering it.
///
/// Threading: every method may be called from any task; a 429 is reported synchronously
/// from the response path, so no task is started for it.
public final class RequestRateLimiter: Sendable {
    public let configuredRate: Double
    private let burst: Double
    private let bucket: Mutex<Bucket>

    private struct Bucket {
        var currentRate: Double
        var tokens: Double
        var refilledAt: ContinuousClock.Instant
        var recoveredAt: ContinuousClock.Instant
    }

    /// - Parameter rate: requests per second. The bucket holds a twentieth of a second's
    ///   worth (at least one), so the rate holds over any stretch longer than that.
    public init(rate: Double) {
        precondition(rate > 0)
        configuredRate = rate
        burst = max(1, rate / 20)
        bucket = Mutex(Bucket(currentRate: rate, tokens: max(1, rate / 20), refilledAt: .now, recoveredAt: .now))
    }

    public var currentRate: Double { bucket.withLock { $0.currentRate } }

    /// Waits until a request may be sent.
    public func acquire() async throws {
        while true {
            let wait: Duration? = bucket.withLock { bucket in
                refill(&bucket)
                guard bucket.tokens < 1 else {
                    bucket.tokens -= 1
                    return nil
                }
                return .seconds((1 - bucket.tokens) / bucket.currentRate)
            }
            guard let wait else { return }
            try await Task.sleep(for: wait)
        }
    }

    /// Fleet Engine answered 429.
    public func throttled() {
        bucket.withLock { bucket in
            refill(&bucket)
            bucket.currentRate = max(configuredRate / 64, bucket.currentRate / 2)
            bucket.recoveredAt = .now
        }
    }

    private func refill(_ bucket: inout Bucket) {
        let now = ContinuousClock.now
        let recovery = (now - bucket.recoveredAt) / .seconds(1)
        if bucket.currentRate < configuredRate, recovery >= 1 {
            bucket.currentRate = min(configuredRate, bucket.currentRate + configuredRate / 10 * recovery.rounded(.down))
            bucket.recoveredAt = now
        }
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.refilledAt) / .seconds(1) * bucket.currentRate)
        bucket.refilledAt = now
    }
}
