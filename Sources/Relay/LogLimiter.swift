import Logging
import Synchronization

/// Lets a few log lines of one kind through per interval and counts the rest,
/// so that a flood of bad records cannot flood the logs.
///
/// Threading: may be called from any thread.
public final class LogLimiter: Sendable {
    private struct Window {
        var start: ContinuousClock.Instant
        var count: Int
        var suppressed: Int
    }

    private let limit: Int
    private let interval: Duration
    private let windows = Mutex<[String: Window]>([:])

    public init(limit: Int = 10, interval: Duration = .seconds(10)) {
        self.limit = limit
        self.interval = interval
    }

    /// Logs `message` as a warning unless lines of `kind` are being held back; the line that
    /// gets through says how many were (`suppressed_similar`).
    public func warning(_ kind: String, to logger: Logger, _ message: @autoclosure () -> Logger.Message) {
        let (allowed, suppressed) = allow(kind)
        guard allowed else { return }
        logger.warning(message(), metadata: suppressed > 0 ? ["suppressed_similar": "\(suppressed)"] : nil)
    }

    /// Whether a line of `kind` may be logged now, and how many were held back
    /// since the last line that was (to mention in it).
    public func allow(_ kind: String, now: ContinuousClock.Instant = .now) -> (allowed: Bool, suppressed: Int) {
        windows.withLock { windows in
            var window = windows[kind] ?? Window(start: now, count: 0, suppressed: 0)
            if now - window.start >= interval { window = Window(start: now, count: 0, suppressed: window.suppressed) }
            window.count += 1
            defer { windows[kind] = window }
            guard window.count <= limit else {
                window.suppressed += 1
                return (false, 0)
            }
            let suppressed = window.suppressed
            window.suppressed = 0
            return (true, suppressed)
        }
    }
}
