import Logging
import Synchronization

/// Reads chosen partitions between chosen offsets by explicit assignment: it never
/// joins a consumer group and never commits, so it can read a topic next to the
/// live relay's group without disturbing it (a replay does this).
///
/// Threading: every method may be called from any task; librdkafka calls run one at
/// a time on a private serial queue.
public final class KafkaPartitionReader: Sendable {
    private let client: RDKafkaClient
    private let blockingCalls = BlockingCallQueue(label: "fleet-relay.kafka.reader")
    /// Where each partition's fetching resumes after a pause, under the current assignment.
    private let positions = Mutex(FetchPositions())
    private let logger: Logger
    /// Whether records come with their headers (see `init`).
    private let readsHeaders: Bool

    public static let defaultProperties: [String: String] = [
        "enable.partition.eof": "true",
        "queued.max.messages.kbytes": "8192",
        "fetch.wait.max.ms": "10",
    ]

    /// - Parameter configuration: librdkafka properties; auto-commit and offset storing are
    ///   always off, and an offset out of range resets to the earliest. librdkafka wants a
    ///   `group.id` even for assignments: a private one is set (never joined, never committed
    ///   to), so the configured group is never touched.
    /// - Parameter readsHeaders: whether records come with their headers; without, each
    ///   record's `headers` is empty, which spares librdkafka a parse per record.
    public init(configuration: KafkaConfiguration, logger: Logger, readsHeaders: Bool = true) throws(KafkaError) {
        var properties = Self.defaultProperties.merging(configuration.properties) { _, user in user }
        properties["group.id"] = "fleet-relay-reader-\(UInt64.random(in: 0...UInt64.max))"
        properties["enable.auto.commit"] = "false"
        properties["enable.auto.offset.store"] = "false"
        // A start offset already deleted by retention restarts the partition at its oldest record,
        // never at its end (librdkafka's default): the caller sees the gap and reports it.
        properties["auto.offset.reset"] = "earliest"
        self.client = try RDKafkaClient(.consumer, configuration: KafkaConfiguration(properties),
                                        context: RDKafkaClientContext(logger: logger))
        self.logger = logger
        self.readsHeaders = readsHeaders
    }

    public func partitionIDs(topic: String, timeout: Duration = .seconds(10)) async throws -> [Int32] {
        try await blockingCalls.run { () throws(KafkaError) in
            try self.client.partitionIDs(topic: topic, timeout: timeout)
        }
    }

    public func watermarks(_ partition: TopicPartition, timeout: Duration = .seconds(10)) async throws -> (low: Int64, high: Int64) {
        try await blockingCalls.run { () throws(KafkaError) in
            try self.client.watermarks(partition, timeout: timeout)
        }
    }

    /// The broker's answer to offsets-for-times per partition; -1 means "no record that new".
    public func offsetsForTimes(_ partitions: [TopicPartition], timestampMilliseconds: Int64,
                                timeout: Duration = .seconds(10)) async throws -> [TopicPartition: Int64] {
        let entries = try await blockingCalls.run { () throws(KafkaError) in
            try self.client.offsetsForTimes(partitions, timestampMilliseconds: timestampMilliseconds, timeout: timeout)
        }
        return Dictionary(entries.map { ($0.topicPartition, $0.offset) }) { first, _ in first }
    }

    /// The timestamp of the first record at or after `offset`, read with a one-partition
    /// fetch; nil when the partition has no record there or it carries no timestamp.
    public func timestamp(of partition: TopicPartition, at offset: Int64,
                          timeout: Duration = .seconds(10)) async throws -> Int64? {
        try await blockingCalls.run { () throws(KafkaError) in
            try self.client.timestamp(of: partition, at: offset, timeout: timeout)
        }
    }

    /// Starts reading each partition at its offset (replacing any earlier assignment).
    public func assign(_ starts: [TopicPartitionOffset]) async throws {
        try await blockingCalls.run { () throws(KafkaError) in
            self.positions.withLock { $0.forgetAll() }
            try self.client.assign(starts)
        }
    }

    /// Stops fetching `pausing` and fetches `resuming` again; records already fetched still come.
    public func pause(_ pausing: Set<TopicPartition>, resume resuming: Set<TopicPartition>) async throws {
        try await blockingCalls.run { () throws(KafkaError) in
            if !pausing.isEmpty { self.client.pause(pausing) }
            if !resuming.isEmpty { self.client.resume(resuming, fetchingFrom: self.positions.withLock { $0.next }) }
        }
    }

    /// Up to `maximum` records from the assigned partitions, and the partitions that
    /// reported reaching their end. Waits at most `timeout` for the first event.
    public func poll(maximum: Int = 1000, timeout: Duration = .milliseconds(500)) async throws
        -> (records: [KafkaRecord], reachedEnd: [TopicPartition]) {
        try await blockingCalls.run { () throws(KafkaError) in
            let polled = self.client.poll(maximum: maximum, timeoutMilliseconds: RDKafkaClient.milliseconds(timeout),
                                          readsHeaders: self.readsHeaders,
                                          generation: { _ in 0 }) { self.logger.warning("Kafka consume error: \($0)") }
            // An explicit assignment has one generation (0): `assign` forgets every position.
            self.positions.withLock { $0.note(polled.records, currentGeneration: { _ in 0 }) }
            return polled
        }
    }
}
