import Kafka
import Synchronization

/// How many requests and dead-letter writes are under way per partition, so a
/// revoke can wait for exactly the work that may still finish.
///
/// Threading: all methods may be called from any thread.
public final class InFlightRegistry: Sendable {
    private let counts = Mutex<[TopicPartition: Int]>([:])

    public init() {}

    public func enter(_ sources: [RecordSource]) {
        counts.withLock { counts in
            for partition in Set(sources.map(\.topicPartition)) { counts[partition, default: 0] += 1 }
        }
    }

    public func leave(_ sources: [RecordSource]) {
        counts.withLock { counts in
            for partition in Set(sources.map(\.topicPartition)) {
                counts[partition, default: 0] -= 1
                if counts[partition] == 0 { counts[partition] = nil }
            }
        }
    }

    public func count(in partitions: [TopicPartition]) -> Int {
        counts.withLock { counts in partitions.reduce(0) { $0 + (counts[$1] ?? 0) } }
    }
}
