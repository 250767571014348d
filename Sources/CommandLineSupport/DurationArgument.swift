import ArgumentParser

/// A duration flag value: `500ms`, `5s`, `2m`, `1h`, or a plain number of seconds.
package struct DurationArgument: ExpressibleByArgument, CustomStringConvertible, Sendable {
    package let duration: Duration
    private let text: String

    package init?(argument: String) {
        let units: [(suffix: String, seconds: Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)]
        let unit = units.first { argument.hasSuffix($0.suffix) && Double(argument.dropLast($0.suffix.count)) != nil }
        let number = Double(unit.map { String(argument.dropLast($0.suffix.count)) } ?? argument)
        guard let number, number.isFinite, number >= 0 else { return nil }
        duration = .milliseconds(Int64((number * (unit?.seconds ?? 1) * 1000).rounded()))
        text = argument
    }

    package var description: String { text }
    package var defaultValueDescription: String { text }
}
