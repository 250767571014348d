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
    private let ticker = Mutex<Task<Void, Never>?>(nil)

    /// Bar on a terminal, log lines otherwise.
    public static func automaticStyle() -> Style {
        isatty(STDERR_FILENO) == 1 ? .bar : .logLines
    }

    public init(style: Style, logInterval: Duration = .seconds(10), logger: Logger) {
        self.style = style
        self.logInterval = logInterval
        self.logger = logger
    }

    public func begin(_ name: String, total: Int, unit: String) {
        end()
        phase.withLock { $0 = Phase(name: name, unit: unit, total: total) }
        guard style != .silent else { return }
        let interval = style == .bar ? Duration.milliseconds(250) : logInterval
        ticker.withLock {
            $0 = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    guard !Task.isCancelled, let self else { return }
                    self.render(final: false)
                }
            }
        }
    }

    public func advance(by count: Int = 1) {
        phase.withLock { $0?.done += count }
    }

    /// Ends the current phase with a last line.
    public func end() {
        ticker.withLock { $0?.cancel(); $0 = nil }
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
