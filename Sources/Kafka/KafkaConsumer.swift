import CRdKafka
import Foundation
import Logging
import Synchronization

/// A partition assignment change, delivered synchronously on the poll thread
/// before librdkafka applies it: a revoke handler that commits finished
/// offsets does so before the partitions can move to another member.
public enum RebalanceEvent: Sendable {
    case assigned([TopicPartition], generation: UInt64)
    /// `lost` is true when the partitions were taken away (session timeout):
    /// committing for them would be rejected and must not be attempted.
    case revoked([TopicPartition], lost: Bool)
}

/// A consumer-group member over librdkafka. Auto-commit is off: offsets are
/// committed only through `commit(_:)`, by whoever knows the records are done.
///
/// Threading: librdkafka is polled on a dedicated thread that delivers records
/// in chunks through `records`; rebalance callbacks run on that thread too.
/// `commit`, `pause`/`resume` and queries may be called from any task.
public final class KafkaConsumer: Sendable {
    /// Called on the poll thread; for a revoke it returns the offsets to commit
    /// before the partitions are given up (ignored when they were lost).
    public typealias RebalanceHandler = @Sendable (RebalanceEvent) -> [TopicPartitionOffset]

    /// Chunks of records in partition order. Ends when the consumer is closed.
    /// At most `maximumBufferedChunks` wait unconsumed: beyond that the poll thread
    /// waits for the reader (librdkafka keeps prefetching up to its own bounds); a
    /// reader stalled for longer than `readerStallBeforePause` gets the partitions
    /// paused, so polling (and with it group membership) goes on.
    public var records: KafkaRecordChunks { KafkaRecordChunks(stream: stream, context: context) }

    public static let maximumChunkSize = 500
    public static let maximumBufferedChunks = 2
    /// Pausing drops librdkafka's prefetched data and refetches on resume: worth it
    /// only for a reader that stopped, not for one that is briefly behind.
    static let readerStallBeforePause = Duration.seconds(1)

    private let stream: AsyncStream<[KafkaRecord]>

    private let handle: RDKafkaHandle
    private let context: ConsumerContext
    private let control: Mutex<Control>
    private let commitCalls = BlockingCallQueue(label: "fleet-relay.kafka.consumer.commits")
    /// Watermark queries wait on their own queue: a slow broker delays the lag gauge, never a commit.
    private let queryCalls = BlockingCallQueue(label: "fleet-relay.kafka.consumer.queries")
    private let logger: Logger

    private struct Control {
        /// Every assigned partition paused (shutdown), whatever `pausedPartitions` says.
        var pauseAll = false
        /// The partitions the owner of flow control wants paused.
        var pausedPartitions: Set<TopicPartition> = []
        var stopRequested = false
        var stopped: [CheckedContinuation<Void, Never>] = []
        var hasStopped = false
    }

    public static let defaultProperties: [String: String] = [
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": "false",
        // A member that died is noticed after 10 s instead of librdkafka's 45 s, so its
        // partitions move on quickly after a crash (Vector's default too).
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "1000",
        // librdkafka prefetches up to 64 MB by default; the relay bounds its own pending
        // records, so more than a few MB ahead only costs memory.
        "queued.max.messages.kbytes": "8192",
        // A broker answers a fetch as soon as data is there; this bounds how long a fetch that
        // found none waits before the next one (librdkafka: 500 ms). Brokers that only answer at
        // the end of the wait (librdkafka's mock cluster among them) would otherwise add up to
        // half a second to every fix; on a real broker it costs a few empty fetches when idle.
        "fetch.wait.max.ms": "100",
    ]

    /// - Parameters:
    ///   - configuration: librdkafka properties; must include `bootstrap.servers` and `group.id`.
    ///     `enable.auto.commit` is always forced off.
    public init(
        configuration: KafkaConfiguration,
        topics: [String],
        logger: Logger,
        rebalanceHandler: @escaping RebalanceHandler = { _ in [] },
        committedOnRevoke: @escaping @Sendable ([TopicPartitionOffset]) -> Void = { _ in }
    ) throws(KafkaError) {
        guard configuration["group.id"] != nil else {
            throw KafkaError(.configuration, "a consumer needs a group id")
        }
        var properties = Self.defaultProperties.merging(configuration.properties) { _, user in user }
        properties["enable.auto.commit"] = "false"
        let conf = try RDKafkaConfig.make(KafkaConfiguration(properties))

        var continuation: AsyncStream<[KafkaRecord]>.Continuation!
        self.stream = AsyncStream(bufferingPolicy: .unbounded) { continuation = $0 }
        let context = ConsumerContext(logger: logger, continuation: continuation, rebalanceHandler: rebalanceHandler,
                                      committedOnRevoke: committedOnRevoke)
        context.attach(to: conf)
        rd_kafka_conf_set_rebalance_cb(conf) { handle, code, partitions, _ in
            guard let handle, let partitions,
                let context = RDKafkaClientContext.from(handle) as? ConsumerContext
            else { return }
            context.rebalance(handle: handle, code: code, partitions: partitions)
        }
        let pointer = try RDKafkaConfig.makeClient(type: RD_KAFKA_CONSUMER, conf: conf)
        self.handle = RDKafkaHandle(pointer: pointer)
        self.context = context
        self.control = Mutex(Control())
        self.logger = logger

        rd_kafka_poll_set_consumer(pointer)
        let subscription = rd_kafka_topic_partition_list_new(Int32(topics.count))!
        defer { rd_kafka_topic_partition_list_destroy(subscription) }
        for topic in topics {
            rd_kafka_topic_partition_list_add(subscription, topic, RD_KAFKA_PARTITION_UA)
        }
        let result = rd_kafka_subscribe(pointer, subscription)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            rd_kafka_destroy(pointer)
            throw KafkaError(.client, "cannot subscribe to \(topics): \(RDKafkaConfig.errorName(result))")
        }
        let thread = Thread { [self] in self.pollLoop() }
        thread.name = "kafka-consumer-poll"
        thread.start()
    }

    /// Stops fetching for every assigned partition, now and after any later assignment,
    /// for good (shutdown). Records already delivered are unaffected.
    public func pauseAll() {
        control.withLock { $0.pauseAll = true }
    }

    /// The partitions to keep paused, replacing the previous wish. The poll thread applies
    /// it to the current assignment, and again after every assignment change: librdkafka
    /// keeps a partition's pause across rebalances, so each change is followed by an
    /// explicit pause or resume of every assigned partition.
    public func setPaused(_ partitions: Set<TopicPartition>) {
        control.withLock { $0.pausedPartitions = partitions }
    }

    /// The partitions the owner of flow control wants paused.
    public var pauseWish: Set<TopicPartition> { control.withLock { $0.pausedPartitions } }

    /// Whether fetching is paused for any assigned partition now.
    public var isPaused: Bool { pausedPartitionCount > 0 }

    /// Assigned partitions whose fetching is paused now, by wish or because the reader fell behind.
    public var pausedPartitionCount: Int { context.pausedPartitionCount.load(ordering: .relaxed) }

    /// Assigned partitions paused although the wish does not name them (the reader is behind,
    /// or the poll loop failed to apply the wish); zero once `pauseAll` is in force.
    public var pausedAgainstWish: Int { context.pausedAgainstWish.load(ordering: .relaxed) }

    /// Seconds since the poll loop last came round; a large value means it is stuck.
    public var secondsSinceLastPoll: Double {
        let last = context.lastPollUptimeNanoseconds.load(ordering: .relaxed)
        return Double(DispatchTime.now().uptimeNanoseconds &- last) / 1e9
    }

    /// Synchronously commits the given offsets (each the next offset to consume).
    /// Safe to call from a rebalance handler.
    public func commitSync(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        guard !offsets.isEmpty else { return }
        let list = RDKafkaTopicPartitionList.make(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_commit(handle.pointer, list, 0)
        if result != RD_KAFKA_RESP_ERR_NO_ERROR {
            throw KafkaError(.commit, "commit of \(offsets) failed: \(RDKafkaConfig.errorName(result))", code: result.rawValue)
        }
        if let failure = RDKafkaTopicPartitionList.firstError(list) {
            throw KafkaError(.commit, "commit failed for \(failure)")
        }
    }

    /// Commits without blocking a Swift concurrency thread.
    public func commit(_ offsets: [TopicPartitionOffset]) async throws {
        try await commitCalls.run { () throws(KafkaError) in try self.commitSync(offsets) }
    }

    /// Low and high watermarks of a partition as the broker reports them.
    public func watermarks(_ partition: TopicPartition, timeout: Duration = .seconds(10)) async throws -> (low: Int64, high: Int64) {
        try await queryCalls.run { () throws(KafkaError) in
            try RDKafkaQueries.watermarks(self.handle.pointer, partition, timeout: timeout)
        }
    }

    /// Leaves the group (running the revoke handler for the current assignment)
    /// and releases librdkafka. `records` finishes. Idempotent.
    public func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let alreadyStopped = control.withLock { control in
                control.stopRequested = true
                if control.hasStopped { return true }
                control.stopped.append(continuation)
                return false
            }
            context.readerGate.wake()
            if alreadyStopped { continuation.resume() }
        }
    }

    // MARK: Poll thread

    private func pollLoop() {
        var applied: Set<TopicPartition> = []
        while !control.withLock({ $0.stopRequested }) {
            context.lastPollUptimeNanoseconds.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            let readerStalled = !context.readerGate.waitForRoom(
                maximumBuffered: Self.maximumBufferedChunks, timeout: Self.readerStallBeforePause)
            let (pauseAll, wish) = control.withLock { ($0.pauseAll, $0.pausedPartitions) }
            let assignment = context.assignment
            let wanted = pauseAll || readerStalled ? assignment : wish.intersection(assignment)
            if context.assignmentChanged {
                context.assignmentChanged = false
                applyPause(pause: wanted, resume: assignment.subtracting(wanted))
                applied = wanted
            } else if wanted != applied {
                applyPause(pause: wanted.subtracting(applied), resume: applied.subtracting(wanted))
                applied = wanted
            }
            context.pausedPartitionCount.store(applied.count, ordering: .relaxed)
            context.pausedAgainstWish.store(pauseAll ? 0 : applied.subtracting(wish).count, ordering: .relaxed)
            let chunk = pollChunk(maximum: Self.maximumChunkSize, timeoutMilliseconds: wanted == assignment ? 10 : 100)
            if !chunk.isEmpty {
                context.readerGate.add()
                context.continuation.yield(chunk)
            }
        }
        logger.info("Kafka consumer leaving its group")
        rd_kafka_consumer_close(handle.pointer)
        rd_kafka_destroy(handle.pointer)
        context.continuation.finish()
        let waiters = control.withLock { control in
            control.hasStopped = true
            defer { control.stopped = [] }
            return control.stopped
        }
        waiters.forEach { $0.resume() }
    }

    private func applyPause(pause: Set<TopicPartition>, resume: Set<TopicPartition>) {
        RDKafkaFetchControl.pause(handle.pointer, pause)
        RDKafkaFetchControl.resume(handle.pointer, resume)
        if !pause.isEmpty || !resume.isEmpty {
            logger.debug("Kafka consumer paused \(pause.count), resumed \(resume.count) partitions")
        }
    }

    private func pollChunk(maximum: Int, timeoutMilliseconds: Int32) -> [KafkaRecord] {
        var chunk: [KafkaRecord] = []
        var timeout = timeoutMilliseconds
        while chunk.count < maximum, let message = rd_kafka_consumer_poll(handle.pointer, timeout) {
            defer { rd_kafka_message_destroy(message) }
            timeout = 0
            if let record = context.record(from: message) { chunk.append(record) }
        }
        return chunk
    }
}

/// The consumer's callback state. Every member but `logger` and the atomics is
/// touched only on the poll thread.
final class ConsumerContext: RDKafkaClientContext, @unchecked Sendable {
    let continuation: AsyncStream<[KafkaRecord]>.Continuation
    let rebalanceHandler: KafkaConsumer.RebalanceHandler
    let committedOnRevoke: @Sendable ([TopicPartitionOffset]) -> Void
    let pausedPartitionCount = Atomic<Int>(0)
    let pausedAgainstWish = Atomic<Int>(0)
    /// Chunks yielded to `records` and not yet taken by the reader.
    let readerGate = ReaderGate()
    let lastPollUptimeNanoseconds = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)
    /// Set by the rebalance callback; the poll loop then applies the pause wish to the whole new assignment.
    var assignmentChanged = false
    /// The current assignment, as the rebalance callbacks changed it.
    var assignment: Set<TopicPartition> = []
    private var nextGeneration: UInt64 = 1
    private var generations: [TopicPartition: UInt64] = [:]
    private var topicNames: [OpaquePointer: String] = [:]

    init(logger: Logger, continuation: AsyncStream<[KafkaRecord]>.Continuation,
         rebalanceHandler: @escaping KafkaConsumer.RebalanceHandler,
         committedOnRevoke: @escaping @Sendable ([TopicPartitionOffset]) -> Void) {
        self.continuation = continuation
        self.rebalanceHandler = rebalanceHandler
        self.committedOnRevoke = committedOnRevoke
        super.init(logger: logger)
    }

    func record(from pointer: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaRecord? {
        RDKafkaMessage.record(from: pointer, logger: logger, topicName: topicName) { generations[$0] ?? 0 }
    }

    private func commitBeforeRevoke(_ handle: OpaquePointer, _ offsets: [TopicPartitionOffset]) {
        guard !offsets.isEmpty else { return }
        let list = RDKafkaTopicPartitionList.make(offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let result = rd_kafka_commit(handle, list, 0)
        if result != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("Commit before revoke failed (\(RDKafkaConfig.errorName(result))); the next owner re-reads from the previous commit")
        } else {
            committedOnRevoke(offsets)
        }
    }

    private func topicName(_ topic: OpaquePointer?) -> String {
        guard let topic else { return "" }
        if let name = topicNames[topic] { return name }
        let name = String(cString: rd_kafka_topic_name(topic))
        topicNames[topic] = name
        return name
    }

    func rebalance(handle: OpaquePointer, code: rd_kafka_resp_err_t,
                   partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) {
        let cooperative = String(cString: rd_kafka_rebalance_protocol(handle)) == "COOPERATIVE"
        let changed = RDKafkaTopicPartitionList.entries(partitions).map(\.topicPartition)
        assignmentChanged = true
        switch code {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            let generation = nextGeneration
            nextGeneration += 1
            for partition in changed { generations[partition] = generation }
            assignment = cooperative ? assignment.union(changed) : Set(changed)
            logger.info("Kafka partitions assigned: \(changed.map(\.description).joined(separator: ", "))")
            _ = rebalanceHandler(.assigned(changed, generation: generation))
            let error = cooperative
                ? rd_kafka_incremental_assign(handle, partitions).map { rd_kafka_error_destroy($0) } != nil
                : rd_kafka_assign(handle, partitions) != RD_KAFKA_RESP_ERR_NO_ERROR
            if error { logger.error("Kafka assign failed for \(changed)") }
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let lost = rd_kafka_assignment_lost(handle) != 0
            logger.info("Kafka partitions \(lost ? "lost" : "revoked"): \(changed.map(\.description).joined(separator: ", "))")
            let finalOffsets = rebalanceHandler(.revoked(changed, lost: lost))
            if !lost { commitBeforeRevoke(handle, finalOffsets) }
            for partition in changed { generations[partition] = nil }
            assignment = cooperative ? assignment.subtracting(changed) : []
            if cooperative {
                if let error = rd_kafka_incremental_unassign(handle, partitions) { rd_kafka_error_destroy(error) }
            } else {
                rd_kafka_assign(handle, nil)
            }
        default:
            logger.error("Kafka rebalance error: \(RDKafkaConfig.errorName(code))")
            _ = rebalanceHandler(.revoked(changed, lost: true))
            generations = [:]
            assignment = []
            rd_kafka_assign(handle, nil)
        }
    }
}

/// The consumer's record chunks; taking a chunk makes room for the poll thread.
public struct KafkaRecordChunks: AsyncSequence, Sendable {
    public typealias Element = [KafkaRecord]

    let stream: AsyncStream<[KafkaRecord]>
    let context: ConsumerContext

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<[KafkaRecord]>.AsyncIterator
        let context: ConsumerContext

        public mutating func next() async -> [KafkaRecord]? {
            let chunk = await base.next()
            if chunk != nil { context.readerGate.take() }
            return chunk
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> [KafkaRecord]? {
            let chunk = await base.next(isolation: actor)
            if chunk != nil { context.readerGate.take() }
            return chunk
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), context: context)
    }
}

/// Counts chunks handed to the reader and not yet taken. The poll thread waits on
/// it while the reader is `maximumBuffered` chunks behind, woken by the reader
/// taking one (or by a stop), never by a timer.
final class ReaderGate: @unchecked Sendable {  // every member is guarded by `condition`
    private let condition = NSCondition()
    private var buffered = 0
    private var woken = false

    func add() {
        condition.lock()
        buffered += 1
        condition.unlock()
    }

    func take() {
        condition.lock()
        buffered -= 1
        condition.signal()
        condition.unlock()
    }

    /// Ends the current wait early (a stop).
    func wake() {
        condition.lock()
        woken = true
        condition.signal()
        condition.unlock()
    }

    /// Waits until fewer than `maximumBuffered` chunks are untaken; false when still
    /// that far behind after `timeout` or when woken.
    func waitForRoom(maximumBuffered: Int, timeout: Duration) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18)
        condition.lock()
        defer { condition.unlock() }
        woken = false
        while buffered >= maximumBuffered {
            if woken || !condition.wait(until: deadline) { return buffered < maximumBuffered }
        }
        return true
    }
}
