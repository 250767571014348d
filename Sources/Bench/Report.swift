import Foundation
import JSON

/// The figures of one run: printed as a table and written as JSON.
struct Report {
    struct Row {
        let scenario: String
        let figure: String
        let value: Double
        let unit: String
        /// The figure divided by the same run's ceiling, when it has one.
        let ratio: Double?
        let ratioOf: String?
    }

    private(set) var rows: [Row] = []
    var notes: [String] = []

    mutating func add(_ scenario: String, _ figure: String, _ value: Double, _ unit: String,
                      ratio: Double? = nil, of ceiling: String? = nil) {
        rows.append(Row(scenario: scenario, figure: figure, value: value, unit: unit, ratio: ratio, ratioOf: ceiling))
        say("  \(figure): \(Self.format(value)) \(unit)" + (ratio.map { " (\(Self.percent($0)) of \(ceiling ?? "ceiling"))" } ?? ""))
    }

    /// Each figure of the first report, at the median of its values (and ratios) in all of them:
    /// the same scenario run several times.
    mutating func addMedians(of reports: [Report]) {
        guard let first = reports.first else { return }
        for row in first.rows {
            let same = reports.flatMap { $0.rows.filter { $0.scenario == row.scenario && $0.figure == row.figure } }
            rows.append(Row(scenario: row.scenario, figure: row.figure, value: Self.median(same.map(\.value)), unit: row.unit,
                            ratio: row.ratio.map { _ in Self.median(same.compactMap(\.ratio)) }, ratioOf: row.ratioOf))
        }
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    /// The value of a figure reported in a section (the first, when several were).
    func value(of figure: String, in scenario: String) -> Double? {
        rows.first { $0.scenario == scenario && $0.figure == figure }?.value
    }

    func table() -> String {
        let header = ["scenario", "figure", "value", "ratio to ceiling"]
        let cells = rows.map { row in
            [row.scenario, row.figure, "\(Self.format(row.value)) \(row.unit)",
             row.ratio.map { "\(Self.percent($0)) of \(row.ratioOf ?? "ceiling")" } ?? ""]
        }
        let widths = (0..<header.count).map { column in ([header] + cells).map { $0[column].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
        }
        return ([line(header), line(widths.map { String(repeating: "-", count: $0) })] + cells.map(line)).joined(separator: "\n")
    }

    func json(environment: [String: String]) -> String {
        var document = JSONObjectWriter()
        var context = JSONObjectWriter()
        for (key, value) in environment.sorted(by: { $0.key < $1.key }) { context.add(key, value) }
        document.add("environment", context)
        document.add("figures", rows.map { row in
            var figure = JSONObjectWriter()
            figure.add("scenario", row.scenario)
            figure.add("figure", row.figure)
            if row.value.isFinite { figure.add("value", row.value) } else { figure.addRaw("value", "null") }
            figure.add("unit", row.unit)
            if let ratio = row.ratio { figure.add("ratio", (ratio * 1000).rounded() / 1000) }
            if let of = row.ratioOf { figure.add("ratio_of", of) }
            return figure
        })
        document.addRaw("notes", "[" + notes.map(JSONText.quoted).joined(separator: ",") + "]")
        return document.json
    }

    static func format(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e12 { return String(Int64(value)) }
        return abs(value) >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    }

    static func percent(_ ratio: Double) -> String { String(format: "%.0f %%", ratio * 100) }
}

/// Writes a line to standard output at once (not buffered), so progress shows in a log file as it happens.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
