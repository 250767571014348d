import Foundation
import Kafka

/// How many requests and dead-letter writes are under way per partition, so a
/// revoke can wait for exactly the work that may still finish.
///
/// Threading: all methods may be called from any thread.
public final class InFlightRegistry: @unchecked Sendable {  // `counts` is guarded by `condition`
    private let condition = NSCondition()
    private var counts: [TopicPartition: Int] = [:]

    public init() {}

    public func enter(_ sources: [RecordSource]) {
        condition.lock()
        for partition in Set(sources.map(\.topicPartition)) { counts[partition, default: 0] += 1 }
        condition.unlock()
    }

    public func leave(_ sources: [RecordSource]) {
        condition.lock()
        for partition in Set(sources.map(\.topicPartition)) {
            counts[partition, default: 0] -= 1
            if counts[partition] == 0 { counts[partition] = nil }
        }
        condition.broadcast()
        condition.unlock()
    }

    public func count(in partitions: [TopicPartition]) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return unlockedCount(in: partitions)
    }

    /// Blocks the calling thread (librdkafka's poll thread, in a revoke) until no work
    /// on the partitions is under way or `timeout` passed; returns what is still under way.
    /// Woken by every `leave`, never by a timer.
    public func waitUntilIdle(_ partitions: [TopicPartition], timeout: Duration) -> Int {
        let deadline = Date(timeIntervalSinceNow: timeout.inSeconds)
        condition.lock()
        defer { condition.unlock() }
        while unlockedCount(in: partitions) > 0, condition.wait(until: deadline) {}
        return unlockedCount(in: partitions)
    }

    private func unlockedCount(in partitions: [TopicPartition]) -> Int {
        partitions.reduce(0) { $0 + (counts[$1] ?? 0) }
    }
}
