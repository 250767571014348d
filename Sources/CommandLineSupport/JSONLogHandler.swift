import FleetEngine
import Foundation
import JSON
import Logging
import Synchronization

/// One JSON object per line on standard error, for log collectors in containers:
/// `{"time": …, "level": …, "logger": …, "message": …, <metadata>}`.
package struct JSONLogHandler: LogHandler {
    package var logLevel: Logger.Level = .info
    package var metadata: Logger.Metadata = [:]
    package let label: String

    private static let output = Mutex(())

    package init(label: String) {
        self.label = label
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var line = JSONObjectWriter()
        line.add("time", RFC3339.format(milliseconds: Int64(Date().timeIntervalSince1970 * 1000)))
        line.add("level", event.level.rawValue)
        line.add("logger", label)
        line.add("message", event.message.description)
        if let error = event.error { line.add("error", "\(error)") }
        let fields = metadata.merging(event.metadata ?? [:], uniquingKeysWith: { _, new in new })
        for (key, value) in fields.sorted(by: { $0.key < $1.key })
        where !["time", "level", "logger", "message", "error"].contains(key) {
            line.add(key, "\(value)")
        }
        let bytes = Data((line.json + "\n").utf8)
        Self.output.withLock { _ in FileHandle.standardError.write(bytes) }
    }
}

/// How log lines are written: `json` (default when standard error is not a terminal) or `text`.
package enum LogFormat: String, CaseIterable {
    case json
    case text

    package static var automatic: LogFormat { isatty(STDERR_FILENO) == 1 ? .text : .json }
}
