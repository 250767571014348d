import Kafka
import Synchronization

/// Which offsets of each assigned partition are finished, and so which may be
/// committed: the commit offset is always the lowest unfinished offset (or one
/// past the last registered when all are finished), so a failed or slow record
/// is never skipped because a later one succeeded.
///
/// Threading: all methods may be called from any thread (the rebalance callback
/// calls in from librdkafka's poll thread).
public final class OffsetTracker: Sendable {
    private struct Partition {
        let generation: UInt64
        /// Set when a revoke began: no new work starts, finishing work still counts.
        var revoking = false
        /// Registered offsets in consumption order from `head` on; finished flags alongside.
        var offsets: [Int64] = []
        var finished: [Bool] = []
        var head = 0
        var lastCommitted: Int64?

        var committable: Int64? {
            if head < offsets.count { return head > 0 ? offsets[head] : nil }
            return offsets.last.map { $0 + 1 }
        }

        var outstanding: Int { offsets.count - head }

        mutating func register(_ offset: Int64) -> Bool {
            if let last = offsets.last, offset <= last { return false }
            offsets.append(offset)
            finished.append(false)
            return true
        }

        mutating func finish(_ offset: Int64) {
            guard let index = index(of: offset), !finished[index] else { return }
            finished[index] = true
            while head < offsets.count, finished[head] { head += 1 }
            if head > 4096, head * 2 > offsets.count { compact() }
        }

        private func index(of offset: Int64) -> Int? {
            var low = head
            var high = offsets.count - 1
            while low <= high {
                let middle = (low + high) / 2
                if offsets[middle] == offset { return middle }
                if offsets[middle] < offset { low = middle + 1 } else { high = middle - 1 }
            }
            return nil
        }

        /// Keeps the last finished offset so `committable` stays answerable.
        private mutating func compact() {
            let keep = head - 1
            offsets.removeFirst(keep)
            finished.removeFirst(keep)
            head = 1
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
    public func register(_ record: KafkaRecord) -> Bool {
        partitions.withLock { partitions in
            guard partitions[record.topicPartition]?.generation == record.assignmentGeneration else { return false }
            return partitions[record.topicPartition]!.register(record.offset)
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
        partitions.withLock { $0.values.reduce(0) { $0 + $1.outstanding } }
    }

    /// Consumed records above the last committed offset (finished or not), over all partitions.
    public var uncommitted: Int64 {
        partitions.withLock { partitions in
            partitions.values.reduce(0) { total, state in
                guard let last = state.offsets.last else { return total }
                let committed = state.lastCommitted ?? state.offsets[0]
                return total + max(0, last + 1 - committed)
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
