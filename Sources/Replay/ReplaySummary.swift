import Foundation

/// What a replay did, printed as a table at its end. Records are counted one by one, so that
/// every record read is accounted for: read = sent + older than the live location + failed +
/// bad + outside the time window + skipped by the input mapping + unfinished.
public struct ReplaySummary: Sendable, Equatable {
    public var recordsInWindow = 0
    /// Records of the window below the checkpoint's offsets: finished by an earlier run.
    public var alreadyFinished = 0
    public var recordsRead = 0
    /// Records of the window deleted by retention before they were read, per partition.
    public var deletedBeforeRead: [Int32: Int64] = [:]
    /// In the offset range but stamped outside `--from`/`--to`.
    public var outsideWindow = 0
    /// Records the input format refused (dead-lettered when a dead-letter topic is set).
    public var bad = 0
    /// Left out by the input mapping's skip rules.
    public var skipped = 0
    /// Dead letters written: bad records and fixes Fleet Engine refused.
    public var deadLettered = 0
    public var requestsSent = 0
    public var requestsAccepted = 0
    /// Fixes sent in accepted requests (as `lastLocation` or in `pastLocations`).
    public var sent = 0
    /// Fixes not newer than Fleet Engine's live location: not sent.
    public var skippedNewerLive = 0
    /// Fixes Fleet Engine refused for good, or that kept failing past the retry deadline:
    /// dead-lettered, or without a dead-letter topic left unfinished for a resumed run.
    public var failed = 0
    /// Records read and not finished, failed ones apart: the replay was interrupted.
    public var unfinished = 0
    public var wallSeconds = 0.0
    public var interrupted = false
    public var dryRun = false

    public init() {}

    /// Records read that no count above holds: 0 unless a record was lost.
    public var unaccounted: Int {
        recordsRead - (sent + skippedNewerLive + failed + bad + outsideWindow + skipped + unfinished)
    }

    public var table: String {
        var rows: [(String, String)] = [("records in window (offsets)", "\(recordsInWindow)")]
        if alreadyFinished > 0 { rows.append(("finished by an earlier run", "\(alreadyFinished)")) }
        rows.append(("records read", "\(recordsRead)"))
        if !deletedBeforeRead.isEmpty {
            let total: Int64 = deletedBeforeRead.values.reduce(0, +)
            let partitions: [String] = deletedBeforeRead.keys.sorted().map { "partition \($0): \(deletedBeforeRead[$0]!)" }
            rows.append(("deleted before read (retention)", "\(total) (" + partitions.joined(separator: ", ") + ")"))
        }
        rows += [
            ("outside the time window", "\(outsideWindow)"),
            ("bad", "\(bad)"),
            ("skipped by the input mapping", "\(skipped)"),
        ]
        if !dryRun {
            rows += [
                ("fixes sent", "\(sent)"),
                ("fixes older than the live location", "\(skippedNewerLive)"),
                ("fixes failed", "\(failed)"),
                ("dead letters written", "\(deadLettered)"),
                ("update requests sent", "\(requestsSent) (\(requestsAccepted) accepted)"),
            ]
            if unfinished > 0 { rows.append(("not finished (left for a resumed run)", "\(unfinished)")) }
        }
        rows.append(("wall time", String(format: "%.1f s", wallSeconds)))
        let width = rows.map(\.0.count).max() ?? 0
        let title = dryRun ? "replay (dry run)" : interrupted ? "replay (interrupted)" : "replay"
        return ([title] + rows.map { "  " + $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + $0.1 })
            .joined(separator: "\n")
    }
}
