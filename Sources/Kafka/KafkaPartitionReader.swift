import CRdKafka
import Logging

/// Reads chosen partitions between chosen offsets by explicit assignment: it never
/// joins a consumer group and never commits, so it can read a topic next to the
/// live relay's group without disturbing it (a replay does this).
///
/// Threading: every method may be called from any task; librdkafka calls run one at
/// a time on a private serial queue.
public final class KafkaPartitionReader: Sendable {
    private let handle: RDKafkaHandle
    private let context: RDKafkaClientContext
    private let blockingCalls = BlockingCallQueue(label: "fleet-relay.kafka.reader")
    private let logger: Logger

    public static let defaultProperties: [String: String] = [
        "enable.partition.eof": "true",
        "queued.max.messages.kbytes": "8192",
        "fetch.wait.max.ms": "10",
    ]

    /// - Parameter configuration: librdkafka properties; auto-commit and offset storing are
    ///   always off. librdkafka wants a `group.id` even for assignments: a private one is set
    ///   (never joined, never committed to), so the configured group is never touched.
    public init(configuration: KafkaConfiguration, logger: Logger) throws(KafkaError) {
        var properties = Self.defaultProperties.merging(configuration.properties) { _, user in user }
        properties["group.id"] = "fleet-relay-reader-\(UInt64.random(in: 0...UInt64.max))"
        properties["enable.auto.commit"] = "false"
        properties["enable.auto.offset.store"] = "false"
        let conf = try RDKafkaConfig.make(KafkaConfiguration(properties))
        let context = RDKafkaClientContext(logger: logger)
        context.attach(to: conf)
        let pointer = try RDKafkaConfig.makeClient(type: RD_KAFKA_CONSUMER, conf: conf)
        rd_kafka_poll_set_consumer(pointer)
        self.handle = RDKafkaHandle(pointer: pointer)
        self.context = context
        self.logger = logger
    }

    deinit {
        rd_kafka_destroy(handle.pointer)
    }

    public func partitionIDs(topic: String, timeout: Duration = .seconds(10)) async throws -> [Int32] {
        try await blockingCalls.run { () throws(KafkaError) in
            try RDKafkaQueries.partitionIDs(self.handle.pointer, topic: topic, timeout: timeout)
        }
    }

    public func watermarks(_ partition: TopicPartition, timeout: Duration = .seconds(10)) async throws -> (low: Int64, high: Int64) {
        try await blockingCalls.run { () throws(KafkaError) in
            try RDKafkaQueries.watermarks(self.handle.pointer, partition, timeout: timeout)
        }
    }

    /// The broker's answer to offsets-for-times per partition; -1 means "no record that new".
    public func offsetsForTimes(_ partitions: [TopicPartition], timestampMilliseconds: Int64,
                                timeout: Duration = .seconds(10)) async throws -> [TopicPartition: Int64] {
        let entries = try await blockingCalls.run { () throws(KafkaError) in
            try RDKafkaQueries.offsetsForTimes(self.handle.pointer, partitions,
                                               timestampMilliseconds: timestampMilliseconds, timeout: timeout)
        }
        return Dictionary(entries.map { ($0.topicPartition, $0.offset) }) { first, _ in first }
    }

    /// The timestamp of the first record at or after `offset`, read with a one-partition
    /// fetch; nil when the partition has no record there or it carries no timestamp.
    public func timestamp(of partition: TopicPartition, at offset: Int64,
                          timeout: Duration = .seconds(10)) async throws -> Int64? {
        try await blockingCalls.run { () throws(KafkaError) in
            try self.assignNow([TopicPartitionOffset(partition, offset: offset)])
            defer { rd_kafka_assign(self.handle.pointer, nil) }
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                guard let message = rd_kafka_consumer_poll(self.handle.pointer, 100) else { continue }
                defer { rd_kafka_message_destroy(message) }
                guard message.pointee.partition == partition.partition else { continue }
                if message.pointee.err == RD_KAFKA_RESP_ERR__PARTITION_EOF { return nil }
                if message.pointee.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                    throw KafkaError(.query, "cannot fetch \(partition)@\(offset): \(RDKafkaConfig.errorName(message.pointee.err))")
                }
                var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
                let timestamp = rd_kafka_message_timestamp(message, &timestampType)
                return timestamp >= 0 ? timestamp : nil
            }
            throw KafkaError(.query, "no answer fetching \(partition)@\(offset) within \(timeout)")
        }
    }

    /// Starts reading each partition at its offset (replacing any earlier assignment).
    public func assign(_ starts: [TopicPartitionOffset]) async throws {
        try await blockingCalls.run { () throws(KafkaError) in try self.assignNow(starts) }
    }

    /// Up to `maximum` records from the assigned partitions, and the partitions that
    /// reported reaching their end. Waits at most `timeout` for the first event.
    public func poll(maximum: Int = 1000, timeout: Duration = .milliseconds(500)) async throws
        -> (records: [KafkaRecord], reachedEnd: [TopicPartition]) {
        try await blockingCalls.run { () throws(KafkaError) in
            var records: [KafkaRecord] = []
            var reachedEnd: [TopicPartition] = []
            var wait = RDKafkaQueries.milliseconds(timeout)
            var topicNames: [OpaquePointer: String] = [:]
            let topicName = { (topic: OpaquePointer?) -> String in
                guard let topic else { return "" }
                if let name = topicNames[topic] { return name }
                let name = String(cString: rd_kafka_topic_name(topic))
                topicNames[topic] = name
                return name
            }
            while records.count < maximum, let message = rd_kafka_consumer_poll(self.handle.pointer, wait) {
                defer { rd_kafka_message_destroy(message) }
                wait = 0
                if message.pointee.err == RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    reachedEnd.append(TopicPartition(topic: topicName(message.pointee.rkt), partition: message.pointee.partition))
                } else if let record = RDKafkaMessage.record(from: message, logger: self.logger, topicName: topicName,
                                                             generation: { _ in 0 }) {
                    records.append(record)
                }
            }
            return (records, reachedEnd)
        }
    }

    private func assignNow(_ starts: [TopicPartitionOffset]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList.make(starts)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_assign(handle.pointer, list)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.client, "cannot assign \(starts): \(RDKafkaConfig.errorName(result))")
        }
    }
}
