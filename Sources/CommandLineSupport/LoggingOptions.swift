import ArgumentParser
import Egress
import Logging

package struct LoggingOptions: ParsableArguments {
    package init() {}

    @Option(help: "Log level: trace, debug, info, notice, warning, error or critical.")
    package var logLevel: Logger.Level = .info

    @Option(help: "Log format: json or text. Default: text on a terminal, json otherwise (containers).")
    package var logFormat: LogFormat?

    package func bootstrap() {
        Self.bootstrap(level: logLevel, format: logFormat ?? .automatic)
    }

    package static func bootstrap(level: Logger.Level, format: LogFormat = .text) {
        LoggingSystem.bootstrap { label in
            switch format {
            case .json:
                var handler = JSONLogHandler(label: label)
                handler.logLevel = level
                return handler
            case .text:
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        }
    }
}

extension LogFormat: ExpressibleByArgument {}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// Shared by `run`, `replay` and the demo.
extension Egress.HTTPVersion: ExpressibleByArgument {}
