import FleetModel
import InputFormats
import Kafka

/// Where a fix came from: enough to finish its offset and to dead-letter it unchanged.
public struct RecordSource: Sendable {
    public let topicPartition: TopicPartition
    public let offset: Int64
    public let generation: UInt64
    public let key: [UInt8]?
    public let value: [UInt8]

    public init(_ record: consuming KafkaRecord) {
        self.topicPartition = record.topicPartition
        self.offset = record.offset
        self.generation = record.assignmentGeneration
        self.key = record.key
        self.value = record.value
    }

    /// `topic/partition/offset`, the dead-letter `fleet-relay-source` header.
    public var description: String { "\(topicPartition.topic)/\(topicPartition.partition)/\(offset)" }
}

/// A decoded fix on its way to Fleet Engine, with its origin.
public struct PendingFix: Sendable {
    public let update: LocationUpdate
    public let source: RecordSource

    public init(update: LocationUpdate, source: RecordSource) {
        self.update = update
        self.source = source
    }
}
