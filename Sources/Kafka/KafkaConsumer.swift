import Foundation
import Logging
import NIOCore
import ServiceLifecycle
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

/// A consumer-group member over librdkafka, a `Service`: `run()` subscribes and owns the poll
/// thread for as long as the consumer lives; nothing joins the group before it runs.
/// Auto-commit is off: offsets are committed only through `enqueueCommit`, by whoever knows
/// the records are done.
///
/// Threading: librdkafka is polled on the thread `run()` starts; it delivers records in
/// chunks through `records`, and runs rebalance callbacks and serves commit answers. `commit`,
/// `setPaused` and queries may be called from any task.
public final class KafkaConsumer: Service, Sendable {
    /// Called on the poll thread; for a revoke it returns the offsets to commit
    /// before the partitions are given up (ignored when they were lost).
    public typealias RebalanceHandler = @Sendable (RebalanceEvent) -> [TopicPartitionOffset]

    /// Chunks of records in partition order, for one reader. Ends when the consumer is closed.
    /// A bounded hand-over: once `maximumBufferedChunks` wait unconsumed the poll thread
    /// waits for the reader to want more (librdkafka keeps prefetching up to its own bounds).
    /// It pauses nothing of its own accord: a reader that must wait (for a schema, say) has the
    /// owner of flow control pause every partition, and the poll loop then polls on, handing
    /// nothing over, so that rebalances and commit answers are served meanwhile.
    public let records: KafkaRecordChunks

    public static let maximumChunkSize = 500
    public static let maximumBufferedChunks = 2
    /// How long one poll waits when nothing arrives. Records, a rebalance, a pause change, the
    /// reader wanting more and a stop all end the wait at once: this only bounds how stale the
    /// poll loop's liveness stamp gets on an idle consumer (tests lengthen it).
    let idlePollMilliseconds = Atomic<Int32>(5_000)

    private let client: RDKafkaClient
    private let topics: [String]
    /// Whether records come with their headers (see `init`).
    private let readsHeaders: Bool
    /// Why subscribing failed, for `run()` to throw once the poll thread ended.
    private let subscriptionFailure = Mutex<KafkaError?>(nil)
    private let context: ConsumerContext
    private let pollThread: PollThread
    private let logger: Logger

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
        // Per-partition lag and committed offsets come with librdkafka's statistics, which cost no
        // query to the broker (0 turns them off).
        "statistics.interval.ms": "5000",
    ]

    /// - Parameters:
    ///   - configuration: librdkafka properties; must include `bootstrap.servers` and `group.id`.
    ///     `enable.auto.commit` is always forced off.
    ///   - readsHeaders: whether records come with their headers; without, each record's
    ///     `headers` is empty, which spares librdkafka a parse per record.
    public init(
        configuration: KafkaConfiguration,
        topics: [String],
        logger: Logger,
        readsHeaders: Bool = true,
        rebalanceHandler: @escaping RebalanceHandler = { _ in [] },
        committedOnRevoke: @escaping @Sendable ([TopicPartitionOffset]) -> Void = { _ in },
        consumeError: @escaping @Sendable (String) -> Void = { _ in },
        statistics: @escaping @Sendable ([TopicPartition: PartitionStatistics]) -> Void = { _ in }
    ) throws(KafkaError) {
        guard configuration["group.id"] != nil else {
            throw KafkaError(.configuration, "a consumer needs a group id")
        }
        var properties = Self.defaultProperties.merging(configuration.properties) { _, user in user }
        properties["enable.auto.commit"] = "false"
        let demand = ReaderDemand()
        let handOver = NIOAsyncSequenceProducer.makeSequence(
            elementType: [KafkaRecord].self,
            backPressureStrategy: NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark(
                lowWatermark: Self.maximumBufferedChunks, highWatermark: Self.maximumBufferedChunks),
            finishOnDeinit: false, delegate: demand)
        self.records = KafkaRecordChunks(sequence: handOver.sequence)
        let context = ConsumerContext(logger: logger, demand: demand, source: handOver.source,
                                      rebalanceHandler: rebalanceHandler,
                                      committedOnRevoke: committedOnRevoke, consumeError: consumeError,
                                      statistics: statistics)
        let client = try RDKafkaClient(.consumer, configuration: KafkaConfiguration(properties), context: context)
        self.client = client
        self.context = context
        demand.wakesPoll { [weak client] in client?.wakePoll() }  // weak: the client holds the demand through its context
        self.pollThread = PollThread(name: "kafka-consumer") {
            demand.wake()
            client.wakePoll()
        }
        self.logger = logger
        self.topics = topics
        self.readsHeaders = readsHeaders
    }

    /// Subscribes, then polls until `close()` or until the task is cancelled; returns once the
    /// consumer has left its group. The poll thread lives exactly as long as this call. Throws
    /// when librdkafka refused the subscription (`records` then ends at once).
    public func run() async throws(KafkaError) {
        await pollThread.run { [self] in
            do throws(KafkaError) {
                try client.subscribe(topics)
                pollLoop()
            } catch {
                subscriptionFailure.withLock { $0 = error }
            }
            leaveGroup()
        }
        if let failure = subscriptionFailure.withLock({ $0 }) { throw failure }
    }

    /// Leaves the group (running the revoke handler for the current assignment)
    /// and releases librdkafka. `records` finishes. Idempotent.
    public func close() async {
        await pollThread.stop { [self] in leaveGroup() }
    }

    /// The partitions to keep paused, replacing the previous wish unless that one has a higher
    /// `sequence` (wishes may arrive out of the order their owner made them in). The poll
    /// thread applies it to the current assignment, and sets every partition's pause again
    /// inside each rebalance callback (see `ConsumerContext.rebalance`). The owner of flow
    /// control is the only one to pause: the consumer applies its wish and nothing else.
    public func setPaused(_ partitions: Set<TopicPartition>, sequence: UInt64) {
        let applied = context.control.withLock { control in
            guard sequence > control.sequence else { return false }
            control = PauseControl(pausedPartitions: partitions, sequence: sequence)
            return true
        }
        guard applied else { return }
        context.demand.wake()
        client.wakePoll()
    }

    /// The partitions the owner of flow control wants paused.
    public var pauseWish: Set<TopicPartition> { context.control.withLock { $0.pausedPartitions } }

    /// Whether fetching is paused for any assigned partition now.
    public var isPaused: Bool { pausedPartitionCount > 0 }

    /// Assigned partitions whose fetching is paused now, as wished.
    public var pausedPartitionCount: Int { context.pausedPartitionCount.load(ordering: .relaxed) }

    /// Seconds since the poll loop last polled librdkafka; a large value means it is stuck
    /// (or waits for a reader that stopped taking records without a pause wished).
    public var secondsSinceLastPoll: Double {
        let last = context.lastPollUptimeNanoseconds.load(ordering: .relaxed)
        return Double(DispatchTime.now().uptimeNanoseconds &- last) / 1e9
    }

    /// Queues a commit of the given offsets (each the next offset to consume) without waiting:
    /// `answer` runs on the poll thread with the broker's answer (nil: committed). Returns the
    /// refusal when the commit was not queued (the consumer is not polling, or has no group);
    /// `answer` is then never called. The caller owns the deadline for an answer that never comes.
    public func enqueueCommit(_ offsets: [TopicPartitionOffset],
                              answer: @escaping @Sendable (KafkaError?) -> Void) -> KafkaError? {
        guard pollThread.isPolling else {
            return KafkaError(.commit, "the consumer is not polling (not running, or closing): nothing committed")
        }
        return client.enqueueCommit(offsets, answer: answer)
    }

    /// Commits and waits for the broker's answer: only from the rebalance handler, inside a
    /// revoke (on the poll thread), for what finished before the revoke waits for work under
    /// way. Returns why the commit failed, nil when it succeeded.
    public func commitDuringRevoke(_ offsets: [TopicPartitionOffset]) -> String? {
        client.commitAndWait(offsets)
    }

    // MARK: Poll thread

    /// Each round applies the pause wish, then polls. While every assigned partition is paused,
    /// polling hands nothing over and goes on (rebalances, commit answers). Otherwise a reader
    /// that is behind is waited for, with no timer: its asking for more, a new wish or a stop
    /// ends the wait. A reader that never asks, with no wish to pause, shows as a poll loop
    /// that stopped coming round.
    private func pollLoop() {
        while pollThread.isPolling {
            let wanted = context.wish(in: context.assignment)
            let paused = context.paused
            if wanted != paused {
                applyPause(pause: wanted.subtracting(paused), resume: paused.subtracting(wanted))
                context.paused = wanted
            }
            context.pausedPartitionCount.store(wanted.count, ordering: .relaxed)
            if wanted != context.assignment, !context.demand.waitForDemand() { continue }
            context.lastPollUptimeNanoseconds.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            let chunk = client.poll(maximum: Self.maximumChunkSize, timeoutMilliseconds: idlePollMilliseconds.load(ordering: .relaxed),
                                    readsHeaders: readsHeaders, generation: context.generation,
                                    onError: context.consumeError).records
            if !chunk.isEmpty {
                context.positions.note(chunk, currentGeneration: context.generation)
                let mark = context.demand.demandMark
                if context.source.yield(chunk) == .stopProducing { context.demand.readerIsBehind(since: mark) }
            }
        }
    }

    /// Leaves the group (commit answers still pending are served meanwhile) and ends `records`.
    private func leaveGroup() {
        logger.info("Kafka consumer leaving its group")
        client.closeConsumer()
        context.commitAnswers.dropAll()
        context.source.finish()
    }

    private func applyPause(pause: Set<TopicPartition>, resume: Set<TopicPartition>) {
        client.pause(pause)
        client.resume(resume, fetchingFrom: context.positions.next)
        if !pause.isEmpty || !resume.isEmpty {
            logger.debug("Kafka consumer paused \(pause.count), resumed \(resume.count) partitions")
        }
    }
}

/// What the owner of flow control wants paused; read by the poll thread.
struct PauseControl {
    /// The partitions the owner of flow control wants paused.
    var pausedPartitions: Set<TopicPartition> = []
    /// The wish's sequence number: an older wish arriving late is ignored.
    var sequence: UInt64 = 0
}

/// The consumer's callback state. Every member but `logger`, `control` and the atomics is
/// touched only on the poll thread.
final class ConsumerContext: RDKafkaClientContext, RDKafkaRebalanceHandling, RDKafkaStatisticsHandling,
    @unchecked Sendable {  // poll-thread state, as said above; the rest is immutable or atomic
    let demand: ReaderDemand
    let source: KafkaRecordChunks.Source
    let rebalanceHandler: KafkaConsumer.RebalanceHandler
    let committedOnRevoke: @Sendable ([TopicPartitionOffset]) -> Void
    /// Errors Kafka answered instead of records, by name (called on the poll thread).
    let consumeError: @Sendable (String) -> Void
    /// The assigned partitions' figures from librdkafka's statistics (called on the poll thread).
    let onStatistics: @Sendable ([TopicPartition: PartitionStatistics]) -> Void
    let pausedPartitionCount = Atomic<Int>(0)
    let lastPollUptimeNanoseconds = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)
    let control = Mutex(PauseControl())
    /// The assigned partitions paused in librdkafka, as this consumer set them.
    var paused: Set<TopicPartition> = []
    /// The current assignment, as the rebalance callbacks changed it.
    var assignment: Set<TopicPartition> = []
    /// Where each partition's fetching resumes after a pause, under its current assignment.
    var positions = FetchPositions()
    private var nextGeneration: UInt64 = 1
    private var generations: [TopicPartition: UInt64] = [:]
    /// The last partition `generation` was asked about, and its answer: records come in runs of
    /// one partition, and this spares each record of a run hashing its partition. A rebalance,
    /// which changes generations, forgets it.
    private var lastGenerationAsked: (partition: TopicPartition, answer: UInt64)?

    init(logger: Logger, demand: ReaderDemand, source: KafkaRecordChunks.Source,
         rebalanceHandler: @escaping KafkaConsumer.RebalanceHandler,
         committedOnRevoke: @escaping @Sendable ([TopicPartitionOffset]) -> Void,
         consumeError: @escaping @Sendable (String) -> Void,
         statistics: @escaping @Sendable ([TopicPartition: PartitionStatistics]) -> Void) {
        self.consumeError = consumeError
        self.onStatistics = statistics
        self.demand = demand
        self.source = source
        self.rebalanceHandler = rebalanceHandler
        self.committedOnRevoke = committedOnRevoke
        super.init(logger: logger)
    }

    func generation(_ partition: TopicPartition) -> UInt64 {
        if let lastGenerationAsked, lastGenerationAsked.partition == partition { return lastGenerationAsked.answer }
        let answer = generations[partition] ?? 0
        lastGenerationAsked = (partition, answer)
        return answer
    }

    /// Which of `partitions` the owner of flow control wants paused.
    func wish(in partitions: Set<TopicPartition>) -> Set<TopicPartition> {
        control.withLock { $0.pausedPartitions }.intersection(partitions)
    }

    func rebalance(_ change: RDKafkaRebalance, cooperative: Bool) -> RDKafkaRebalanceAnswer {
        var answer = RDKafkaRebalanceAnswer()
        lastGenerationAsked = nil
        switch change {
        case .assign(let partitions):
            let generation = nextGeneration
            nextGeneration += 1
            for partition in partitions { generations[partition] = generation }
            positions.forget(partitions)
            assignment = cooperative ? assignment.union(partitions) : Set(partitions)
            logger.info("Kafka partitions assigned: \(partitions.map(\.description).joined(separator: ", "))")
            _ = rebalanceHandler(.assigned(partitions, generation: generation))
        case .revoke(let partitions, let lost):
            logger.info("Kafka partitions \(lost ? "lost" : "revoked"): \(partitions.map(\.description).joined(separator: ", "))")
            answer.commit = rebalanceHandler(.revoked(partitions, lost: lost))
            for partition in partitions { generations[partition] = nil }
            positions.forget(partitions)
            assignment = cooperative ? assignment.subtracting(partitions) : []
            // librdkafka keeps a pause across assignments: none is left behind for a later one.
            answer.resume.formUnion(partitions)
        }
        setPauses(of: assignment, &answer)
        return answer
    }

    /// Every partition assigned after the change gets its pause set again, as the wish wants
    /// it: a pause or resume the poll loop made while librdkafka began the rebalance may have
    /// been dropped. One to be fetching is paused and resumed, which restarts its fetching from
    /// the last record handed over (a lone resume of a partition that is not paused would restart
    /// it from wherever librdkafka last set its position, which may be long ago).
    private func setPauses(of partitions: Set<TopicPartition>, _ answer: inout RDKafkaRebalanceAnswer) {
        let wanted = wish(in: partitions)
        answer.pause.formUnion(partitions)
        answer.resume.formUnion(partitions.subtracting(wanted))
        paused = wanted
    }

    /// librdkafka also reports partitions it no longer fetches: only the assignment is handed on.
    func statistics(_ json: UnsafeBufferPointer<UInt8>) {
        onStatistics(PartitionStatistics.parse(json).filter { assignment.contains($0.key) })
    }

    func committedBeforeRevoke(_ offsets: [TopicPartitionOffset], failure: String?) {
        if let failure {
            logger.warning("Commit before revoke failed (\(failure)); the next owner re-reads from the previous commit")
        } else {
            committedOnRevoke(offsets)
        }
    }
}

/// The consumer's record chunks, handed over with back-pressure: taking a chunk is what lets
/// the poll thread fetch more.
public struct KafkaRecordChunks: AsyncSequence, Sendable {
    public typealias Element = [KafkaRecord]
    typealias HandOver = NIOAsyncSequenceProducer<
        [KafkaRecord], NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, ReaderDemand
    >
    typealias Source = HandOver.Source

    let sequence: HandOver

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: HandOver.AsyncIterator

        public mutating func next() async -> [KafkaRecord]? {
            await base.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: sequence.makeAsyncIterator())
    }
}

/// Whether the reader wants more chunks, as the hand-over's back-pressure says. The poll thread
/// waits on it while the reader is behind, woken by the reader asking for more (or by a stop),
/// never by a timer; a poll waiting in librdkafka is woken too, so paused partitions resume.
final class ReaderDemand: NIOAsyncSequenceProducerDelegate, @unchecked Sendable {  // guarded by `condition`
    // `wanted`, `demands` and `woken` are guarded by `condition`; `wakePoll` is set once, before polling starts.
    private let condition = NSCondition()
    private var wanted = true
    /// How often the reader asked for more: a yield's "stop" must not undo an ask that came
    /// while the yield was returning.
    private var demands = 0
    private var woken = false
    private let wakePoll = Mutex<@Sendable () -> Void>({})

    func wakesPoll(_ wake: @escaping @Sendable () -> Void) {
        wakePoll.withLock { $0 = wake }
    }

    /// Taken before a yield, for `readerIsBehind(since:)`.
    var demandMark: Int {
        condition.lock()
        defer { condition.unlock() }
        return demands
    }

    /// A yield found the hand-over full: the next wait lasts until the reader takes a chunk,
    /// unless it asked for more since `mark` (the hand-over may call `produceMore` before the
    /// yield returned).
    func readerIsBehind(since mark: Int) {
        condition.lock()
        if demands == mark { wanted = false }
        condition.unlock()
    }

    func produceMore() {
        condition.lock()
        wanted = true
        demands += 1
        condition.signal()
        condition.unlock()
        wakePoll.withLock { $0 }()
    }

    /// The reader is gone (shutdown): nothing is held back for it any more.
    func didTerminate() {
        produceMore()
    }

    /// Ends the current wait early, or the next one at once when none is under way (a stop, a
    /// new pause wish).
    func wake() {
        condition.lock()
        woken = true
        condition.signal()
        condition.unlock()
    }

    /// Waits until the reader wants more; false when woken first, or when it still does not
    /// after `timeout` (nil: no limit).
    func waitForDemand(timeout: Duration? = nil) -> Bool {
        let deadline = timeout.map { Date(timeIntervalSinceNow: $0.inSeconds) }
        condition.lock()
        defer {
            woken = false
            condition.unlock()
        }
        while !wanted, !woken {
            if let deadline {
                if !condition.wait(until: deadline) { break }
            } else {
                condition.wait()
            }
        }
        return wanted
    }
}
