import Synchronization

/// Running totals of what the relay did, for status lines and tests.
///
/// Threading: lock-free counters, updated from any task.
public final class RelayStatistics: Sendable {
    public let consumed = Atomic<Int>(0)
    /// Records sent as a request's `lastLocation` and accepted.
    public let accepted = Atomic<Int>(0)
    /// Records that travelled in an accepted request's `pastLocations` (or beyond its cap).
    public let superseded = Atomic<Int>(0)
    /// Records older than a fix Fleet Engine already accepted for their vehicle.
    public let stale = Atomic<Int>(0)
    public let deadLettered = Atomic<Int>(0)
    public let requestsAccepted = Atomic<Int>(0)
    public let requestsFailed = Atomic<Int>(0)
    public let retries = Atomic<Int>(0)
    public let commits = Atomic<Int>(0)

    public init() {}

    public struct Snapshot: Sendable, Equatable {
        public var consumed = 0
        public var accepted = 0
        public var superseded = 0
        public var stale = 0
        public var deadLettered = 0
        public var requestsAccepted = 0
        public var requestsFailed = 0
        public var retries = 0
        public var commits = 0

        /// Records that reached a final outcome.
        public var finished: Int { accepted + superseded + stale + deadLettered }
    }

    public var snapshot: Snapshot {
        Snapshot(
            consumed: consumed.load(ordering: .relaxed), accepted: accepted.load(ordering: .relaxed),
            superseded: superseded.load(ordering: .relaxed), stale: stale.load(ordering: .relaxed),
            deadLettered: deadLettered.load(ordering: .relaxed),
            requestsAccepted: requestsAccepted.load(ordering: .relaxed),
            requestsFailed: requestsFailed.load(ordering: .relaxed), retries: retries.load(ordering: .relaxed),
            commits: commits.load(ordering: .relaxed))
    }
}
