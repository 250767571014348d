import Kafka

/// The live relay's record feed: the consumer group's member, which hands over what it fetched
/// and applies the pipeline's pause wish.
extension KafkaConsumer: RecordFeed {
    public func read(into take: @Sendable (consuming [KafkaRecord]) async throws -> Void) async throws {
        for await chunk in records { try await take(consume chunk) }
    }

    public func applyPauseWish(_ wish: Set<TopicPartition>, sequence: UInt64) {
        setPaused(wish, sequence: sequence)
    }
}

/// The live relay's commit sink: the group's committed offsets, queued on the consumer's poll
/// thread, which answers with the broker's reply.
struct GroupCommits: CommitSink {
    /// Weak: the consumer's rebalance handler holds the relay, which must not keep the consumer.
    private weak let consumer: KafkaConsumer?

    init(consumer: KafkaConsumer) {
        self.consumer = consumer
    }

    func submit(_ order: CommitOrder, answer: @escaping @Sendable (String?) -> Void) -> String? {
        guard let consumer else { return "the relay stopped" }
        return consumer.enqueueCommit(order.offsets) { failure in answer(failure?.message) }?.message
    }
}
