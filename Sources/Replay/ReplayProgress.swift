import AsyncAlgorithms
import Foundation
import Logging
import Synchronization

/// Shows how far a replay phase is: on a terminal a progress bar redrawn in place
/// on stderr, otherwise (containers, CI) one log line every `logInterval`.
public final class ReplayProgress: Sendable {
    public enum Style: Sendable {
        case bar
        case logLines
        case silent
    }

    private struct Phase {
        var name: String
        var unit: String
        var total: Int
        var done = 0
        var startedAt = ContinuousClock.now
    }

    public let style: Style
    public let logInterval: Duration
    private let logger: Logger
    private let phase = Mutex<Phase?>(nil)

    /// Bar on a terminal, log lines otherwise.
    public static func automaticStyle() -> Style {
        isatty(STDERR_FILENO) == 1 ? .bar : .logLines
    }

    public init(style: Style, logInterval: Duration = .seconds(10), logger: Logger) {
        self.style = style
        self.logInterval = logInterval
        self.logger = logger
    }

    /// Runs `body` as one phase: progress is redrawn (bar) or logged (lines) while it runs,
    /// by a ticker that is a child task of this call, and a last line is shown when it ends.
    public func phase<Result, Failure: Error>(
        _ name: String, total: Int, unit: String, _ body: () async throws(Failure) -> Result
    ) async throws(Failure) -> Result {
        phase.withLock { $0 = Phase(name: name, unit: unit, total: total) }
        defer { end() }
        guard style != .silent else { return try await body() }
        let interval = style == .bar ? Duration.milliseconds(250) : logInterval
        let outcome: Swift.Result<Result, Failure> = await withTaskGroup(of: Void.self) { ticker in
            ticker.addTask {
                for await _ in AsyncTimerSequence(interval: interval, clock: .continuous) { self.render(final: false) }
            }
            defer { ticker.cancelAll() }
            do throws(Failure) {
                return .success(try await body())
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    public func advance(by count: Int = 1) {
        phase.withLock { $0?.done += count }
    }

    /// Ends the current phase with a last line.
    private func end() {
        if phase.withLock({ $0 != nil }), style != .silent { render(final: true) }
        phase.withLock { $0 = nil }
    }

    private func render(final: Bool) {
        guard let current = phase.withLock({ $0 }) else { return }
        let line = Self.describe(current)
        switch style {
        case .bar:
            let width = 30
            let filled = current.total > 0 ? min(width, current.done * width / current.total) : width
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            let text = "\r\(current.name.padding(toLength: 8, withPad: " ", startingAt: 0)) [\(bar)] \(line)\u{1B}[K"
            FileHandle.standardError.write(Data((text + (final ? "\n" : "")).utf8))
        case .logLines:
            logger.info("Replay \(current.name): \(line)")
        case .silent:
            break
        }
    }

    private static func describe(_ phase: Phase) -> String {
        let seconds = max(0.001, (ContinuousClock.now - phase.startedAt) / .seconds(1))
        let rate = Double(phase.done) / seconds
        var text = "\(phase.done)/\(phase.total) \(phase.unit), \(Int(rate.rounded()))/s"
        if rate > 0, phase.done < phase.total {
            text += ", ETA \(Int((Double(phase.total - phase.done) / rate).rounded(.up))) s"
        }
        return text
    }
}
