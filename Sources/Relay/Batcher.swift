import Synchronization

/// Gathers decoded fixes into batches of at most `maximumSize`, releasing a
/// partial batch once its first fix has waited `linger`. Lingering lets several
/// fixes of one vehicle meet and travel in one request.
///
/// Threading: all methods may be called from any task.
public final class Batcher: Sendable {
    public let maximumSize: Int
    public let linger: Duration
    private let state = Mutex<(fixes: [PendingFix], firstAt: ContinuousClock.Instant?)>(([], nil))

    public init(maximumSize: Int, linger: Duration) {
        self.maximumSize = max(1, maximumSize)
        self.linger = linger
    }

    /// Adds a fix; returns a full batch when this fix completed one.
    public func add(_ fix: PendingFix, now: ContinuousClock.Instant = .now) -> [PendingFix]? {
        state.withLock { state in
            if state.fixes.isEmpty { state.firstAt = now }
            state.fixes.append(fix)
            guard state.fixes.count >= maximumSize else { return nil }
            return Self.take(&state)
        }
    }

    /// The pending batch if its oldest fix has lingered long enough.
    public func takeIfLingered(now: ContinuousClock.Instant = .now) -> [PendingFix]? {
        state.withLock { state in
            guard let firstAt = state.firstAt, now - firstAt >= linger else { return nil }
            return Self.take(&state)
        }
    }

    /// Whatever is pending, regardless of age (at shutdown).
    public func takeAll() -> [PendingFix] {
        state.withLock { Self.take(&$0) }
    }

    private static func take(_ state: inout (fixes: [PendingFix], firstAt: ContinuousClock.Instant?)) -> [PendingFix] {
        defer { state = ([], nil) }
        return state.fixes
    }
}
