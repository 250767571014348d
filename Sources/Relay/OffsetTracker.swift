import DequeModule
import Kafka
import Synchronization

/// Which offsets of each assigned partition are finished, and so which may be
/// committed: the commit offset is always the lowest unfinished offset (or one
/// past the last registered when all are finished), so a failed or slow record
/// is never skipped because a later one succeeded.
///
/// Only unfinished offsets are kept: a record stuck in retries holds its
/// partition's commit, while the records behind it that finished cost nothing.
///
/// Threading: all methods may be called from any thread (the rebalance callback
/// calls in from librdkafka's poll thread).
public final class OffsetTracker: Sendable {
    private struct Unfinished {
        let offset: Int64
        let registeredAt: ContinuousClock.Instant
    }

    private struct Partition {
        let generation: UInt64
        /// Set when a revoke began: no new work starts, finishing work still counts.
        var revoking = false
        /// Registered offsets not yet finished, in increasing order.
        var unfinished = Deque<Unfinished>()
        var firstRegistered: Int64?
        var lastRegistered: Int64?
        var lastCommitted: Int64?

        /// Nil while nothing finished since the partition was assigned: its position is still the group's.
        var committable: Int64? {
            guard let first = unfinished.first else { return lastRegistered.map { $0 + 1 } }
            return first.offset == firstRegistered ? nil : first.offset
        }

        mutating func register(_ offset: Int64, at now: ContinuousClock.Instant) -> Bool {
            if let last = lastRegistered, offset <= last { return false }
            if firstRegistered == nil { firstRegistered = offset }
            lastRegistered = offset
            unfinished.append(Unfinished(offset: offset, registeredAt: now))
            return true
        }

        /// Records finish roughly in consumption order, so the search mostly ends near the front.
        mutating func finish(_ offset: Int64) {
            var (low, high) = (0, unfinished.count - 1)
            while low <= high {
                let middle = (low + high) / 2
                let found = unfinished[middle].offset
                if found == offset {
                    unfinished.remove(at: middle)
                    return
                }
                if found < offset { low = middle + 1 } else { high = middle - 1 }
            }
        }
    }

    private let partitions = Mutex<[TopicPartition: Partition]>([:])

    public init() {}

    public func assign(_ assigned: [TopicPartition], generation: UInt64) {
        partitions.withLock { partitions in
            for partition in assigned { partitions[partition] = Partition(generation: generation) }
        }
    }

    /// Forgets the partitions and returns their final commit offsets (those not yet committed).
    public func revoke(_ revoked: [TopicPartition]) -> [TopicPartitionOffset] {
        partitions.withLock { partitions in
            revoked.compactMap { partition in
                guard let state = partitions.removeValue(forKey: partition),
                    let offset = state.committable, offset != state.lastCommitted
                else { return nil }
                return TopicPartitionOffset(partition, offset: offset)
            }
        }
    }

    /// Records that a consumed record is now in progress. Returns false when the record
    /// belongs to no current assignment (fetched before a revoke): it must then be skipped.
    public func register(_ record: KafkaRecord, now: ContinuousClock.Instant = .now) -> Bool {
        partitions.withLock { partitions in
            guard partitions[record.topicPartition]?.generation == record.assignmentGeneration else { return false }
            return partitions[record.topicPartition]!.register(record.offset, at: now)
        }
    }

    /// Marks a record done (accepted, dead-lettered, superseded or stale). Ignored when
    /// its partition has since been revoked or reassigned.
    public func finish(_ source: RecordSource) {
        partitions.withLock { partitions in
            guard partitions[source.topicPartition]?.generation == source.generation else { return }
            partitions[source.topicPartition]!.finish(source.offset)
        }
    }

    /// Offsets that advanced since the last commit.
    public func committableOffsets() -> [TopicPartitionOffset] {
        partitions.withLock { partitions in
            partitions.compactMap { partition, state in
                guard let offset = state.committable, offset != state.lastCommitted else { return nil }
                return TopicPartitionOffset(partition, offset: offset)
            }.sorted { $0.topicPartition < $1.topicPartition }
        }
    }

    public func markCommitted(_ offsets: [TopicPartitionOffset]) {
        partitions.withLock { partitions in
            for entry in offsets where partitions[entry.topicPartition] != nil {
                partitions[entry.topicPartition]!.lastCommitted = entry.offset
            }
        }
    }

    /// Whether work on the record should go on: its partition is still assigned
    /// under the same generation and not being revoked.
    public func owns(_ source: RecordSource) -> Bool {
        partitions.withLock { partitions in
            guard let state = partitions[source.topicPartition] else { return false }
            return state.generation == source.generation && !state.revoking
        }
    }

    /// Stops new work on the partitions ahead of their revoke; work already under
    /// way may still finish and be committed.
    public func beginRevoke(_ revoking: [TopicPartition]) {
        partitions.withLock { partitions in
            for partition in revoking where partitions[partition] != nil { partitions[partition]!.revoking = true }
        }
    }

    /// Registered records not yet finished, over all partitions.
    public var outstanding: Int {
        partitions.withLock { $0.values.reduce(0) { $0 + $1.unfinished.count } }
    }

    /// Registered records not yet finished, per assigned partition (flow control pauses by these).
    public var unfinishedPerPartition: [TopicPartition: Int] {
        partitions.withLock { $0.mapValues(\.unfinished.count) }
    }

    /// How long each assigned partition's oldest unfinished record has waited (zero when none waits).
    public func oldestUnfinishedAge(now: ContinuousClock.Instant = .now) -> [TopicPartition: Duration] {
        partitions.withLock { $0.mapValues { $0.unfinished.first.map { now - $0.registeredAt } ?? .zero } }
    }

    /// Consumed records above the last committed offset (finished or not), over all partitions.
    public var uncommitted: Int64 {
        partitions.withLock { partitions in
            partitions.values.reduce(0) { total, state in
                guard let last = state.lastRegistered, let first = state.firstRegistered else { return total }
                return total + max(0, last + 1 - (state.lastCommitted ?? first))
            }
        }
    }

    /// The last committed offset of each assigned partition that has one.
    public var lastCommittedOffsets: [TopicPartition: Int64] {
        partitions.withLock { $0.compactMapValues(\.lastCommitted) }
    }

    public var assignedPartitions: [TopicPartition] {
        partitions.withLock { $0.keys.sorted() }
    }
}
