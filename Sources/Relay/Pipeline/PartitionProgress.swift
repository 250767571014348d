import DequeModule
import Kafka

/// One assigned partition as the pipeline sees it: which of its offsets are
/// unfinished, and so which offset may be committed. The commit offset is always
/// the lowest unfinished offset (or one past the last registered when all are
/// finished), so a failed or slow record is never skipped because a later one
/// succeeded.
///
/// Only unfinished offsets are kept: a record stuck in retries holds its
/// partition's commit, while the records behind it that finished cost nothing.
struct PartitionProgress {
    struct Unfinished {
        let offset: Int64
        let registeredAt: ContinuousClock.Instant
    }

    /// The consumer's assignment generation: records of an earlier one are not ours.
    let generation: UInt64
    /// Set when a revoke began: no new work starts, work under way may still finish.
    var revoking = false {
        didSet { if revoking { revocation.set() } }
    }
    /// The same, for requests under way to read without the pipeline's lock.
    let revocation = Revocation()
    /// Fetching is to be paused: the partition holds its share of pending records.
    var paused = false
    /// Requests and dead-letter writes under way that settle records of this partition.
    var workUnderWay = 0
    /// Registered offsets not yet finished, in increasing order.
    private(set) var unfinished = Deque<Unfinished>()
    private var firstRegistered: Int64?
    private(set) var lastRegistered: Int64?
    var lastCommitted: Int64?

    init(generation: UInt64) {
        self.generation = generation
    }

    /// Nil while nothing finished since the partition was assigned: its position is still the group's.
    var committable: Int64? {
        guard let first = unfinished.first else { return lastRegistered.map { $0 + 1 } }
        return first.offset == firstRegistered ? nil : first.offset
    }

    /// The commit offset, when it advanced since the last commit.
    var offsetToCommit: Int64? {
        guard let offset = committable, offset != lastCommitted else { return nil }
        return offset
    }

    /// Consumed records above the last committed offset, finished or not.
    var uncommitted: Int64 {
        guard let last = lastRegistered, let first = firstRegistered else { return 0 }
        return max(0, last + 1 - (lastCommitted ?? first))
    }

    /// The broker confirmed a commit of `offset`; an older answer arriving late changes nothing.
    mutating func recordCommitted(_ offset: Int64) {
        lastCommitted = max(lastCommitted ?? .min, offset)
    }

    /// False for an offset already registered (a record fetched twice): it is skipped.
    mutating func register(_ offset: Int64, at now: ContinuousClock.Instant) -> Bool {
        if let last = lastRegistered, offset <= last { return false }
        if firstRegistered == nil { firstRegistered = offset }
        lastRegistered = offset
        unfinished.append(Unfinished(offset: offset, registeredAt: now))
        return true
    }

    /// Records finish roughly in consumption order, so the search mostly ends near the front.
    /// False when the offset was not unfinished (finished before).
    @discardableResult
    mutating func finish(_ offset: Int64) -> Bool {
        var (low, high) = (0, unfinished.count - 1)
        while low <= high {
            let middle = (low + high) / 2
            let found = unfinished[middle].offset
            if found == offset {
                unfinished.remove(at: middle)
                return true
            }
            if found < offset { low = middle + 1 } else { high = middle - 1 }
        }
        return false
    }

    /// How long the oldest unfinished record has waited (zero when none waits).
    func oldestUnfinishedAge(now: ContinuousClock.Instant) -> Duration {
        unfinished.first.map { now - $0.registeredAt } ?? .zero
    }
}
