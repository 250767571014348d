import CRdKafka
import Logging
import Synchronization

/// The one Swift type that calls librdkafka: a consumer or producer handle, the callbacks
/// its owner needs, and every operation the Kafka module uses. The consumer, producer,
/// partition reader and inspector hold one (and `KafkaTesting`'s mock cluster) and never touch librdkafka
/// themselves.
///
/// Threading: librdkafka handles are thread-safe. Methods marked blocking wait for a
/// broker; callers run them on their own thread (a poll loop) or through `BlockingCallQueue`,
/// never on a Swift concurrency thread. `enqueueCommit` does not wait: its answer is served by
/// the consumer's poll loop.
package final class RDKafkaClient: @unchecked Sendable {  // the handle is thread-safe; `context` is immutable
    package enum Kind {
        case consumer
        case producer
    }

    private let handle: OpaquePointer
    let context: RDKafkaClientContext
    /// The queue a poll waits on, and waking it ends that wait: a consumer's own queue (commit
    /// answers arrive there too) or a producer's main queue (its delivery reports).
    private let pollQueue: OpaquePointer
    /// The consumer's queue, nil for a producer.
    private let consumerQueue: OpaquePointer?

    /// Creates a client. A consumer with a rebalance handler gets the rebalance callback,
    /// a producer with `reportsDeliveries` the delivery-report callback.
    package init(_ kind: Kind, configuration: KafkaConfiguration, context: RDKafkaClientContext) throws(KafkaError) {
        let conf = try RDKafkaConfig.make(configuration)
        context.attach(to: conf)
        if context is RDKafkaRebalanceHandling { rd_kafka_conf_set_rebalance_cb(conf, RDKafkaClient.rebalanceCallback) }
        if context is RDKafkaDeliveryHandling { rd_kafka_conf_set_dr_msg_cb(conf, RDKafkaClient.deliveryCallback) }
        if context is RDKafkaStatisticsHandling { rd_kafka_conf_set_stats_cb(conf, RDKafkaClient.statisticsCallback) }
        self.handle = try RDKafkaConfig.makeClient(type: kind == .consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf: conf)
        self.context = context
        if kind == .consumer { rd_kafka_poll_set_consumer(handle) }
        self.pollQueue = (kind == .consumer ? rd_kafka_queue_get_consumer(handle) : rd_kafka_queue_get_main(handle))!
        self.consumerQueue = kind == .consumer ? pollQueue : nil
    }

    deinit {
        rd_kafka_queue_destroy(pollQueue)
        rd_kafka_destroy(handle)
    }

    /// Makes a `poll` waiting on the consumer's queue (a producer's: on its reports) return at
    /// once, or the next one when none waits; callable from any thread.
    func wakePoll() {
        rd_kafka_queue_yield(pollQueue)
    }

    /// Checks the properties with librdkafka itself, without creating a client.
    static func validate(_ configuration: KafkaConfiguration) throws(KafkaError) {
        rd_kafka_conf_destroy(try RDKafkaConfig.make(configuration))
    }

    static func errorName(_ code: Int32) -> String {
        RDKafkaConfig.errorName(rd_kafka_resp_err_t(code))
    }

    // MARK: Consuming

    func subscribe(_ topics: [String]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList.make(topics.map { TopicPartition(topic: $0, partition: RD_KAFKA_PARTITION_UA) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_subscribe(handle, list)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.client, "cannot subscribe to \(topics): \(RDKafkaConfig.errorName(result))")
        }
    }

    /// Blocking: up to `maximum` records, waiting at most `timeoutMilliseconds` for the first.
    /// Serves callbacks meanwhile (rebalances, commit answers). Partitions that reported their
    /// end (with `enable.partition.eof`) come back in `reachedEnd`; errors Kafka answered
    /// instead of records go to `onError`, by name. Records come without headers unless `readsHeaders`.
    func poll(maximum: Int, timeoutMilliseconds: Int32, readsHeaders: Bool, generation: (TopicPartition) -> UInt64,
              onError: (String) -> Void) -> (records: [KafkaRecord], reachedEnd: [TopicPartition]) {
        var records: [KafkaRecord] = []
        var reachedEnd: [TopicPartition] = []
        var timeout = timeoutMilliseconds
        var topicNames = RDKafkaTopicNames()
        while records.count < maximum, let message = rd_kafka_consumer_poll(handle, timeout) {
            defer { rd_kafka_message_destroy(message) }
            timeout = 0
            if message.pointee.err == RD_KAFKA_RESP_ERR__PARTITION_EOF {
                reachedEnd.append(TopicPartition(topic: topicNames.name(of: message.pointee.rkt), partition: message.pointee.partition))
            } else if let record = RDKafkaMessage.record(from: message, readsHeaders: readsHeaders,
                                                         topicNames: &topicNames, generation: generation,
                                                         onError: onError) {
                records.append(record)
            }
        }
        return (records, reachedEnd)
    }

    func pause(_ partitions: Set<TopicPartition>) {
        withList(partitions) { _ = rd_kafka_pause_partitions(handle, $0) }
    }

    /// Resumes fetching. A partition given a position (one past the last record handed over)
    /// is also sought there, where its fetching resumes anyway: librdkafka 2.0 does not wake a
    /// broker thread that idles because every partition it fetches was paused, so without the
    /// seek the resumed fetch waits for the thread's next wakeup, up to a second; a seek to a
    /// concrete offset wakes it.
    func resume(_ partitions: Set<TopicPartition>, fetchingFrom positions: [TopicPartition: Int64] = [:]) {
        withList(partitions) { _ = rd_kafka_resume_partitions(handle, $0) }
        let seeks = partitions.sorted().compactMap { partition in
            positions[partition].map { TopicPartitionOffset(partition, offset: $0) }
        }
        guard !seeks.isEmpty else { return }
        let list = RDKafkaTopicPartitionList.make(seeks)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        // Without a timeout the seek is only begun: it reports no error, and the poll loop goes on.
        if let error = rd_kafka_seek_partitions(handle, list, 0) { rd_kafka_error_destroy(error) }
    }

    /// Starts reading each partition at its offset, replacing the assignment (no group membership).
    func assign(_ starts: [TopicPartitionOffset]) throws(KafkaError) {
        let list = RDKafkaTopicPartitionList.make(starts)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_assign(handle, list)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.client, "cannot assign \(starts): \(RDKafkaConfig.errorName(result))")
        }
    }

    func unassign() {
        rd_kafka_assign(handle, nil)
    }

    /// Blocking: leaves the group (running the revoke callback) and serves what is left.
    func closeConsumer() {
        rd_kafka_consumer_close(handle)
    }

    /// Queues a commit of the offsets and returns at once; librdkafka sends it with the group
    /// generation of the moment it takes it from its queue. `answer` runs on the poll thread with
    /// the broker's answer (nil: committed). Returns the refusal when librdkafka would not queue
    /// it (no group): `answer` is then never called.
    func enqueueCommit(_ offsets: [TopicPartitionOffset], answer: @escaping CommitAnswers.Answer) -> KafkaError? {
        let id = context.commitAnswers.register(offsets, answer)
        let list = RDKafkaTopicPartitionList.make(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = rd_kafka_commit_queue(handle, list, consumerQueue, RDKafkaClient.commitCallback,
                                          UnsafeMutableRawPointer(bitPattern: id))
        guard error != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        _ = context.commitAnswers.take(id)
        return KafkaError(.commit, "commit of \(offsets) refused: \(RDKafkaConfig.errorName(error))", code: error.rawValue)
    }

    /// Commits the offsets and waits for the broker's answer; nil when committed, else why not.
    /// For the poll thread inside a revoke only, where waiting is what must happen.
    func commitAndWait(_ offsets: [TopicPartitionOffset]) -> String? {
        Self.commitAndWait(handle, offsets)
    }

    private static func commitAndWait(_ handle: OpaquePointer, _ offsets: [TopicPartitionOffset]) -> String? {
        let list = RDKafkaTopicPartitionList.make(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_commit(handle, list, 0)
        return result != RD_KAFKA_RESP_ERR_NO_ERROR ? RDKafkaConfig.errorName(result) : RDKafkaTopicPartitionList.firstError(list)
    }

    // MARK: Queries (blocking)

    func committed(_ partitions: [TopicPartition], timeout: Duration) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList.make(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_committed(handle, list, Self.milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "cannot read committed offsets: \(RDKafkaConfig.errorName(result))")
        }
        return RDKafkaTopicPartitionList.entries(list)
    }

    func watermarks(_ partition: TopicPartition, timeout: Duration) throws(KafkaError) -> (low: Int64, high: Int64) {
        var low: Int64 = -1
        var high: Int64 = -1
        let result = rd_kafka_query_watermark_offsets(handle, partition.topic, partition.partition, &low, &high,
                                                      Self.milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "cannot read watermarks of \(partition): \(RDKafkaConfig.errorName(result))")
        }
        return (low, high)
    }

    /// The earliest offset per partition whose timestamp is at or after `timestampMilliseconds`;
    /// -1 (end) where no record is that new.
    func offsetsForTimes(_ partitions: [TopicPartition], timestampMilliseconds: Int64,
                         timeout: Duration) throws(KafkaError) -> [TopicPartitionOffset] {
        let list = RDKafkaTopicPartitionList.make(partitions.map { TopicPartitionOffset($0, offset: timestampMilliseconds) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_offsets_for_times(handle, list, Self.milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "cannot look up offsets for times: \(RDKafkaConfig.errorName(result))")
        }
        if let error = RDKafkaTopicPartitionList.firstError(list) {
            throw KafkaError(.query, "cannot look up offsets for times: \(error)")
        }
        return RDKafkaTopicPartitionList.entries(list)
    }

    /// The topic's partition ids, from the cluster's metadata.
    func partitionIDs(topic: String, timeout: Duration) throws(KafkaError) -> [Int32] {
        guard let topicHandle = rd_kafka_topic_new(handle, topic, nil) else {
            throw KafkaError(.query, "cannot open topic \(topic)")
        }
        defer { rd_kafka_topic_destroy(topicHandle) }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let result = rd_kafka_metadata(handle, 0, topicHandle, &metadata, Self.milliseconds(timeout))
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
            throw KafkaError(.query, "cannot read metadata of \(topic): \(RDKafkaConfig.errorName(result))")
        }
        defer { rd_kafka_metadata_destroy(metadata) }
        guard metadata.pointee.topic_cnt == 1 else { throw KafkaError(.query, "no metadata for topic \(topic)") }
        let entry = metadata.pointee.topics[0]
        guard entry.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.query, "topic \(topic): \(RDKafkaConfig.errorName(entry.err))")
        }
        return (0..<Int(entry.partition_cnt)).map { entry.partitions[$0].id }.sorted()
    }

    /// The timestamp of the first record at or after `offset`, read with a one-partition
    /// assignment (replacing any other); nil when there is no record there or it has no timestamp.
    func timestamp(of partition: TopicPartition, at offset: Int64, timeout: Duration) throws(KafkaError) -> Int64? {
        try assign([TopicPartitionOffset(partition, offset: offset)])
        defer { unassign() }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let message = rd_kafka_consumer_poll(handle, 100) else { continue }
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

    // MARK: Producing

    /// Hands one record to librdkafka; on success librdkafka holds `opaque` until the delivery
    /// report. `RD_KAFKA_RESP_ERR__QUEUE_FULL` means: wait for a report and try again.
    func produce(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader],
                 timestampMilliseconds: Int64?, opaque: UnsafeMutableRawPointer) -> KafkaError? {
        let error = RDKafkaProduce.produce(handle, topic: topic, key: key, value: value, headers: headers,
                                           timestampMilliseconds: timestampMilliseconds, opaque: opaque)
        guard error != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return KafkaError(.produce, "cannot produce to \(topic): \(RDKafkaConfig.errorName(error))", code: error.rawValue)
    }

    static let queueFull = RD_KAFKA_RESP_ERR__QUEUE_FULL.rawValue
    static let timedOut = RD_KAFKA_RESP_ERR__TIMED_OUT.rawValue

    /// Blocking: serves delivery reports and other callbacks, waiting for the first of them
    /// or for `wakePoll`, however long that takes.
    func servePoll() {
        rd_kafka_poll(handle, -1)
    }

    /// Blocking: waits until every queued record is delivered or failed; false on timeout.
    func flush(timeout: Duration) -> Bool {
        rd_kafka_flush(handle, Self.milliseconds(timeout)) == RD_KAFKA_RESP_ERR_NO_ERROR
    }

    // MARK: Testing

    /// The librdkafka handle, for `KafkaTesting`'s mock cluster, which lives inside a client
    /// handle. Nothing in this package's production targets calls it.
    package var handleForTesting: OpaquePointer { handle }

    // MARK: Helpers

    static func milliseconds(_ duration: Duration) -> Int32 {
        Int32(clamping: duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    private func withList(_ partitions: Set<TopicPartition>,
                          _ call: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> Void) {
        guard !partitions.isEmpty else { return }
        let list = RDKafkaTopicPartitionList.make(partitions.sorted())
        defer { rd_kafka_topic_partition_list_destroy(list) }
        call(list)
    }

    // MARK: Callbacks

    /// Runs on the consumer's poll thread before librdkafka applies an assignment change:
    /// the owner decides what to commit before a revoke and how each partition's pause must
    /// stand, then the change is applied here.
    ///
    /// The pauses are set here, before the (un)assign call, because only here no pause or
    /// resume can be lost. librdkafka 2.0 numbers each pause, resume, fetch start and stop of a
    /// partition as it creates it and drops one that reaches the partition after a newer one
    /// (an "outdated op"). Its own thread creates such operations while it applies an
    /// assignment (a resume when the assign call arrives, another resume and the fetch start
    /// once the committed offsets came back), so an application pause or resume created just
    /// before them but queued just after is dropped: a partition whose pause survived from an
    /// earlier assignment then stays paused for good. Here librdkafka waits for this callback,
    /// and each pause or resume is answered before the next is made.
    private static let rebalanceCallback: @convention(c) (
        OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
    ) -> Void = { handle, code, list, _ in
        guard let handle, let list, let owner = RDKafkaClientContext.from(handle) as? RDKafkaRebalanceHandling else { return }
        let cooperative = String(cString: rd_kafka_rebalance_protocol(handle)) == "COOPERATIVE"
        let partitions = RDKafkaTopicPartitionList.entries(list).map(\.topicPartition)
        switch code {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            let answer = owner.rebalance(.assign(partitions), cooperative: cooperative)
            setPauses(handle, answer)
            let failed = cooperative
                ? rd_kafka_incremental_assign(handle, list).map { rd_kafka_error_destroy($0) } != nil
                : rd_kafka_assign(handle, list) != RD_KAFKA_RESP_ERR_NO_ERROR
            if failed { owner.logger.error("Kafka assign failed for \(partitions)") }
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let lost = rd_kafka_assignment_lost(handle) != 0
            let answer = owner.rebalance(.revoke(partitions, lost: lost), cooperative: cooperative)
            if !lost, !answer.commit.isEmpty { commitBeforeRevoke(handle, answer.commit, owner) }
            setPauses(handle, answer)
            if cooperative {
                if let error = rd_kafka_incremental_unassign(handle, list) { rd_kafka_error_destroy(error) }
            } else {
                rd_kafka_assign(handle, nil)
            }
        default:
            owner.logger.error("Kafka rebalance error: \(RDKafkaConfig.errorName(code))")
            setPauses(handle, owner.rebalance(.revoke(partitions, lost: true), cooperative: false))
            rd_kafka_assign(handle, nil)
        }
        // The poll returns now, so that its loop applies any later change of the pause wish at once.
        rd_kafka_yield(handle)
    }

    /// Pauses, then resumes (a partition in both is paused and resumed: its fetching restarts
    /// from the last record handed to the application, whatever librdkafka held before).
    private static func setPauses(_ handle: OpaquePointer, _ answer: RDKafkaRebalanceAnswer) {
        for (partitions, call) in [(answer.pause, rd_kafka_pause_partitions), (answer.resume, rd_kafka_resume_partitions)]
        where !partitions.isEmpty {
            let list = RDKafkaTopicPartitionList.make(partitions.sorted())
            defer { rd_kafka_topic_partition_list_destroy(list) }
            _ = call(handle, list)
        }
    }

    private static func commitBeforeRevoke(_ handle: OpaquePointer, _ offsets: [TopicPartitionOffset],
                                           _ owner: any RDKafkaRebalanceHandling) {
        owner.committedBeforeRevoke(offsets, failure: commitAndWait(handle, offsets))
    }

    private static let deliveryCallback: @convention(c) (
        OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?
    ) -> Void = { handle, message, _ in
        guard let message, let opaque = message.pointee._private else { return }
        let owner = handle.flatMap { RDKafkaClientContext.from($0) as? RDKafkaDeliveryHandling }
        owner?.delivered(opaque, result: message.pointee.err.rawValue)
    }

    /// Runs on the poll thread every `statistics.interval.ms`; returning 0 lets librdkafka free the text.
    private static let statisticsCallback: @convention(c) (
        OpaquePointer?, UnsafeMutablePointer<CChar>?, Int, UnsafeMutableRawPointer?
    ) -> Int32 = { handle, json, length, _ in
        guard let handle, let json, let owner = RDKafkaClientContext.from(handle) as? RDKafkaStatisticsHandling else { return 0 }
        owner.statistics(UnsafeRawBufferPointer(start: json, count: length).bindMemory(to: UInt8.self))
        return 0
    }

    private static let commitCallback: @convention(c) (
        OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
    ) -> Void = { handle, error, list, opaque in
        guard let handle, let context = RDKafkaClientContext.from(handle),
              let (offsets, answer) = context.commitAnswers.take(UInt(bitPattern: opaque)) else { return }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            answer(KafkaError(.commit, "commit of \(offsets) failed: \(RDKafkaConfig.errorName(error))", code: error.rawValue))
        } else if let failure = list.flatMap({ RDKafkaTopicPartitionList.firstError($0) }) {
            answer(KafkaError(.commit, "commit failed for \(failure)"))
        } else {
            answer(nil)
        }
    }
}

/// An assignment change as the consumer's owner sees it.
enum RDKafkaRebalance {
    case assign([TopicPartition])
    /// `lost`: taken away (session timeout); committing for them would be rejected.
    case revoke([TopicPartition], lost: Bool)
}

/// What a consumer does inside a rebalance callback, before librdkafka applies the change.
struct RDKafkaRebalanceAnswer {
    /// For a revoke: the offsets to commit before the partitions go (ignored when they were lost).
    var commit: [TopicPartitionOffset] = []
    /// Partitions to pause, then partitions to resume; a partition in both restarts its fetching.
    var pause: Set<TopicPartition> = []
    var resume: Set<TopicPartition> = []
}

/// A consumer context that takes part in rebalances.
protocol RDKafkaRebalanceHandling: RDKafkaClientContext {
    /// What to do before librdkafka applies the change.
    func rebalance(_ change: RDKafkaRebalance, cooperative: Bool) -> RDKafkaRebalanceAnswer
    /// The commit before a revoke ended; `failure` says why it did not succeed.
    func committedBeforeRevoke(_ offsets: [TopicPartitionOffset], failure: String?)
}

/// A client context that hears librdkafka's statistics (`statistics.interval.ms`).
protocol RDKafkaStatisticsHandling: RDKafkaClientContext {
    /// The statistics JSON; valid only during the call.
    func statistics(_ json: UnsafeBufferPointer<UInt8>)
}

/// A producer context that hears each produced record's delivery report.
protocol RDKafkaDeliveryHandling: RDKafkaClientContext {
    /// `opaque` is what `produce` was given; `result` 0 means delivered.
    func delivered(_ opaque: UnsafeMutableRawPointer, result: Int32)
}

/// Answers of commits under way, by the number librdkafka hands back to the commit callback:
/// nothing is retained through a raw pointer, so an answer that never comes (librdkafka drops a
/// commit's callback across some rebalances) leaves only its entry, which the owner's deadline
/// has already given up on and `close` drops.
final class CommitAnswers: Sendable {
    typealias Answer = @Sendable (KafkaError?) -> Void

    private struct Waiting {
        var next: UInt = 1
        var answers: [UInt: (offsets: [TopicPartitionOffset], answer: Answer)] = [:]
    }

    private let waiting = Mutex(Waiting())

    func register(_ offsets: [TopicPartitionOffset], _ answer: @escaping Answer) -> UInt {
        waiting.withLock { waiting in
            defer { waiting.next += 1 }
            waiting.answers[waiting.next] = (offsets, answer)
            return waiting.next
        }
    }

    func take(_ id: UInt) -> (offsets: [TopicPartitionOffset], answer: Answer)? {
        waiting.withLock { $0.answers.removeValue(forKey: id) }
    }

    /// Forgets every answer still awaited (the consumer closed: none will come).
    func dropAll() {
        waiting.withLock { $0.answers = [:] }
    }

    var count: Int { waiting.withLock { $0.answers.count } }
}

extension Duration {
    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
