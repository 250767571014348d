import Foundation

/// What a replay did, printed as a table at its end.
public struct ReplaySummary: Sendable, Equatable {
    public var recordsInWindow = 0
    public var recordsRead = 0
    /// Records of the window deleted by retention before they were read, per partition.
    public var deletedBeforeRead: [Int32: Int64] = [:]
    /// In the offset range but stamped outside `--from`/`--to`.
    public var outsideWindow = 0
    public var bad = 0
    /// Left out by the input mapping's skip rules.
    public var skipped = 0
    public var deadLettered = 0
    public var vehicles = 0
    /// Settled by an earlier run with the same checkpoint.
    public var alreadySettled = 0
    public var requestsSent = 0
    public var accepted = 0
    public var skippedNewerLive = 0
    public var failed = 0
    public var failuresByReason: [String: Int] = [:]
    public var wallSeconds = 0.0
    public var interrupted = false
    public var dryRun = false

    public init() {}

    /// Vehicles neither settled nor failed: left for a resumed run.
    public var unsettled: Int { vehicles - alreadySettled - accepted - skippedNewerLive - failed }

    public var table: String {
        var rows: [(String, String)] = [
            ("records in window (offsets)", "\(recordsInWindow)"),
            ("records read", "\(recordsRead)"),
        ]
        if !deletedBeforeRead.isEmpty {
            let total: Int64 = deletedBeforeRead.values.reduce(0, +)
            let partitions: [String] = deletedBeforeRead.keys.sorted().map { "partition \($0): \(deletedBeforeRead[$0]!)" }
            rows.append(("deleted before read (retention)", "\(total) (" + partitions.joined(separator: ", ") + ")"))
        }
        rows += [
            ("outside the time window", "\(outsideWindow)"),
            ("bad", "\(bad)" + (bad > 0 ? " (\(deadLettered) dead-lettered)" : "")),
            ("skipped by the input mapping", "\(skipped)"),
            ("vehicles", "\(vehicles)"),
        ]
        if alreadySettled > 0 { rows.append(("settled by an earlier run", "\(alreadySettled)")) }
        if !dryRun {
            rows += [
                ("update requests sent", "\(requestsSent)"),
                ("accepted", "\(accepted)"),
                ("skipped (newer live location)", "\(skippedNewerLive)"),
                ("failed", "\(failed)" + failuresByReason.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()),
            ]
            if unsettled > 0 { rows.append(("not sent (interrupted)", "\(unsettled)")) }
        }
        rows.append(("wall time", String(format: "%.1f s", wallSeconds)))
        let width = rows.map(\.0.count).max() ?? 0
        let title = dryRun ? "replay (dry run)" : interrupted ? "replay (interrupted)" : "replay"
        return ([title] + rows.map { "  " + $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + $0.1 })
            .joined(separator: "\n")
    }
}
