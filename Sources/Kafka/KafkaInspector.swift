import Foundation
import Logging

/// Reads a group's committed offsets and partitions' watermarks without joining
/// the group (OffsetFetch needs no membership). Used for lag reporting and tests.
///
/// Threading: every method may be called from any task.
public final class KafkaInspector: Sendable {
    private let client: RDKafkaClient
    private let blockingCalls = BlockingCallQueue(label: "fleet-relay.kafka.inspector")

    public init(configuration: KafkaConfiguration, group: String, logger: Logger) throws(KafkaError) {
        var properties = configuration.properties
        properties["group.id"] = group
        properties["enable.auto.commit"] = "false"
        self.client = try RDKafkaClient(.consumer, configuration: KafkaConfiguration(properties),
                                        context: RDKafkaClientContext(logger: logger))
    }

    /// Committed offset per partition; nil where the group has committed nothing.
    public func committedOffsets(topic: String, partitions: Int, timeout: Duration = .seconds(10)) async throws -> [Int32: Int64?] {
        let list = (0..<Int32(partitions)).map { TopicPartition(topic: topic, partition: $0) }
        let entries = try await blockingCalls.run { () throws(KafkaError) in
            try self.client.committed(list, timeout: timeout)
        }
        return Dictionary(uniqueKeysWithValues: entries.map {
            ($0.topicPartition.partition, $0.offset >= 0 ? $0.offset : nil)
        })
    }

    /// High watermark (the offset the next produced record will get) per partition.
    public func highWatermarks(topic: String, partitions: Int, timeout: Duration = .seconds(10)) async throws -> [Int32: Int64] {
        var result: [Int32: Int64] = [:]
        for partition in 0..<Int32(partitions) {
            let topicPartition = TopicPartition(topic: topic, partition: partition)
            result[partition] = try await blockingCalls.run { () throws(KafkaError) in
                try self.client.watermarks(topicPartition, timeout: timeout).high
            }
        }
        return result
    }
}
