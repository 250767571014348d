import CRdKafka
import Foundation
import Logging

/// Reads a group's committed offsets and partitions' watermarks without joining
/// the group (OffsetFetch needs no membership). Used for lag reporting and tests.
///
/// Threading: every method may be called from any task.
public final class KafkaInspector: Sendable {
    private let handle: RDKafkaHandle
    private let context: RDKafkaClientContext
    private let blockingCalls = BlockingCallQueue(label: "fleet-relay.kafka.inspector")

    public init(configuration: KafkaConfiguration, group: String, logger: Logger) throws(KafkaError) {
        var properties = configuration.properties
        properties["group.id"] = group
        properties["enable.auto.commit"] = "false"
        let conf = try RDKafkaConfig.make(KafkaConfiguration(properties))
        let context = RDKafkaClientContext(logger: logger)
        context.attach(to: conf)
        self.handle = RDKafkaHandle(pointer: try RDKafkaConfig.makeClient(type: RD_KAFKA_CONSUMER, conf: conf))
        self.context = context
    }

    deinit {
        rd_kafka_destroy(handle.pointer)
    }

    /// Committed offset per partition; nil where the group has committed nothing.
    public func committedOffsets(topic: String, partitions: Int, timeout: Duration = .seconds(10)) async throws -> [Int32: Int64?] {
        let list = (0..<Int32(partitions)).map { TopicPartition(topic: topic, partition: $0) }
        let entries = try await blockingCalls.run { () throws(KafkaError) in
            try RDKafkaQueries.committed(self.handle.pointer, list, timeout: timeout)
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
                try RDKafkaQueries.watermarks(self.handle.pointer, topicPartition, timeout: timeout).high
            }
        }
        return result
    }
}
