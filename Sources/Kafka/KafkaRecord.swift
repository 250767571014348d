/// One consumed Kafka record, copied out of librdkafka's buffers.
public struct KafkaRecord: Sendable {
    public let topic: String
    public let partition: Int32
    public let offset: Int64
    public let key: [UInt8]?
    public let value: [UInt8]
    /// Record timestamp in milliseconds since the epoch, when the broker has one.
    public let timestampMilliseconds: Int64?
    /// Identifies the assignment of this partition the record was fetched under,
    /// so work finishing after a revoke cannot be mistaken for the new assignment's.
    public let assignmentGeneration: UInt64
    public let headers: [KafkaHeader]

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8],
        timestampMilliseconds: Int64? = nil, assignmentGeneration: UInt64 = 0, headers: [KafkaHeader] = []
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestampMilliseconds = timestampMilliseconds
        self.assignmentGeneration = assignmentGeneration
        self.headers = headers
    }

    public func header(_ name: String) -> String? {
        headers.first { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) }
    }

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
}

public struct TopicPartition: Hashable, Sendable, CustomStringConvertible, Comparable {
    public let topic: String
    public let partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)/\(partition)" }

    /// The partition number alone: the relay and the replay each read one topic, so the
    /// partitions a process keeps books of never share a hash, where hashing the topic's text
    /// cost every lookup a pass over it (the pipeline looks partitions up several times per
    /// record and per request). Partitions of two topics with the same number share a hash and
    /// are told apart by comparison; equal values still hash alike.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(partition)
    }

    public static func < (lhs: TopicPartition, rhs: TopicPartition) -> Bool {
        (lhs.topic, lhs.partition) < (rhs.topic, rhs.partition)
    }
}

/// A partition's offset: for commits, the offset of the next record to consume.
public struct TopicPartitionOffset: Hashable, Sendable, CustomStringConvertible {
    public let topicPartition: TopicPartition
    public let offset: Int64

    public init(_ topicPartition: TopicPartition, offset: Int64) {
        self.topicPartition = topicPartition
        self.offset = offset
    }

    public var description: String { "\(topicPartition)@\(offset)" }
}

/// A header attached to a produced record.
public struct KafkaHeader: Sendable, Equatable {
    public let name: String
    public let value: [UInt8]

    public init(name: String, value: [UInt8]) {
        self.name = name
        self.value = value
    }

    public init(name: String, value: String) {
        self.init(name: name, value: Array(value.utf8))
    }
}
