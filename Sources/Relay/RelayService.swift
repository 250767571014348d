import FleetAuth
import FleetEngine
import InputFormats
import Kafka
import Logging
import Metrics
import ServiceLifecycle
import Synchronization


/// The relay: consume → decode → pipeline (per-vehicle lanes, coalescing, offsets,
/// flow control) → sign → send → commit. A `Service` for ServiceLifecycle: graceful
/// shutdown stops fetching, drains in-flight work for up to `shutdownTimeout`, commits
/// what finished and leaves the consumer group.
///
/// Guarantee: an offset is committed only when every record at or below it was
/// accepted by Fleet Engine, dead-lettered, or superseded by a newer accepted fix.
/// The decisions are `PipelineState`'s, carried out by `PipelineDriver` (requests, dead
/// letters, deadlines); this type runs the consumer and the tasks around them, and the
/// drain on shutdown. Rebalances: `RelayService+Rebalance.swift`; decoding: `RecordDecoding`;
/// computed gauges: `RelayGauges`.
public final class RelayService: Service, Sendable {
    public let configuration: RelayConfiguration
    public let statistics = RelayStatistics()
    public let health: RelayHealth
    private let tokens: TokenCache
    private let client: FleetEngineClient
    let logLimiter = LogLimiter()
    let driver: PipelineDriver
    var pipeline: Pipeline { driver.pipeline }
    private let decoding: RecordDecoding
    let logger: Logger
    let consumerState = Mutex<KafkaConsumer?>(nil)
    let gauges = RelayGauges()
    /// How long each revoke waited for the requests and dead-letter writes under way.
    let revokeWait = Timer(label: "fleet_relay_revoke_wait_seconds")
    /// Set once shutdown has drained: revokes from then on must not wait for work that was abandoned.
    let drained = Atomic<Bool>(false)

    /// `releaseFreedMemory` runs once each time a burst of unfinished records (a cold start, a
    /// backlog) has drained, on the thread that finished it.
    public init(configuration: RelayConfiguration, client: FleetEngineClient, tokens: TokenCache,
                logger: Logger, releaseFreedMemory: @escaping @Sendable () -> Void = {}) throws(KafkaError) {
        self.configuration = configuration
        self.logger = logger
        self.tokens = tokens
        self.client = client
        self.health = RelayHealth(maximumOutage: configuration.readyMaximumOutage, logger: logger)
        self.decoding = RecordDecoding(decoder: configuration.makeDecoder(), statistics: statistics, logLimiter: logLimiter, logger: logger)
        var limits = PipelineLimits(
            pastLocations: configuration.pastLocationsLimit, minimumInterval: configuration.minimumIntervalPerVehicle,
            vehicleIdleLimit: configuration.vehicleIdleTimeout, maximumPendingRecords: configuration.maximumPendingRecords,
            retryPolicy: configuration.retryPolicy, retryDeadline: configuration.retryDeadline,
            commitInterval: configuration.commitInterval)
        limits.concurrency = ConcurrencyLimit.Settings(maximum: configuration.maximumInFlight)
        limits.maximumRequestsPerSecond = configuration.maximumRequestsPerSecond
        // A dead letter carries the consumed record whole, plus headers: the producer must take
        // anything the consumer can hand over (the broker's topic limit still applies).
        let producerProperties = configuration.kafka.properties.merging(
            ["message.timeout.ms": "30000", "message.max.bytes": String(Self.deadLetterMaximumBytes)]) { user, _ in user }
        let producer = try KafkaProducer(configuration: KafkaConfiguration(producerProperties), logger: logger)
        let deadLetters = DeadLetterWriter(topic: configuration.deadLetterTopic, producer: producer,
                                           logLimiter: logLimiter,
                                           health: health, logger: logger)
        let forwarder = UpdateForwarder(client: client, tokens: tokens, statistics: statistics, health: health,
                                        logLimiter: logLimiter, logger: logger)
        self.driver = PipelineDriver(limits: limits, forwarder: forwarder, deadLetters: deadLetters, statistics: statistics,
                                     health: health, logLimiter: logLimiter, logger: logger,
                                     maximumInFlight: configuration.maximumInFlight, releaseFreedMemory: releaseFreedMemory)
    }

    /// Room for a record as large as Kafka's default fetch limit per partition (1 MiB)
    /// several times over, plus the dead-letter headers.
    static let deadLetterMaximumBytes = 4 * 1024 * 1024

    // MARK: Observation

    /// Vehicles the relay remembers (idle ones are forgotten after `vehicleIdleTimeout`).
    public var vehicleCount: Int { pipeline.read(\.vehicleCount) }
    public var uncommittedRecords: Int64 { pipeline.read(\.uncommittedRecords) }
    public var assignedPartitions: [TopicPartition] { pipeline.read(\.assignedPartitions) }
    public var isPaused: Bool { consumerState.withLock { $0?.isPaused ?? false } }
    /// Records consumed and not yet finished (what flow control bounds).
    public var pendingRecords: Int { pipeline.read(\.unfinishedRecords) }

    /// The pipeline and the consumer in one line, for a test that timed out to say where work stands.
    var stateDescription: String {
        let consumer = consumerState.withLock { $0 }
        let pipeline = pipeline.read { state in
            "queued fixes \(state.queuedFixes), ready vehicles \(state.readyVehicles), requests in flight \(state.requestsInFlight), "
                + "workers waiting \(state.waitingWorkers), vehicles failing \(state.vehiclesFailing), "
                + "unfinished \(state.unfinishedPerPartition.map { "\($0.key): \($0.value)" }.sorted()), "
                + "pause wish \(state.pauseWish.map(\.description).sorted()), next deadline in \(state.nextDeadline - .now)"
        }
        guard let consumer else { return pipeline + "; no consumer" }
        return pipeline + "; consumer: paused \(consumer.pausedPartitionCount), "
            + "wish \(consumer.pauseWish.map(\.description).sorted()), last poll \(consumer.secondsSinceLastPoll) s ago"
    }

    // MARK: Running

    public func run() async throws {
        let consumer = try makeConsumer()
        consumerState.withLock { $0 = consumer }
        // The consumer's rebalance handler holds the relay: letting go of the consumer ends the
        // cycle, so that its librdkafka handle is destroyed instead of reconnecting until exit.
        defer { consumerState.withLock { $0 = nil } }
        driver.issueCommits { [weak consumer, weak self] order in
            guard let consumer, let self else { return "the relay stopped" }
            return consumer.enqueueCommit(order.offsets) { failure in
                self.driver.commitAnswered(order, failure: failure?.message)
            }?.message
        }
        driver.applyPauses { [weak consumer] wish, sequence in consumer?.setPaused(wish, sequence: sequence) }
        health.watchPollLoop(secondsSinceLastPoll: { [weak consumer] in consumer?.secondsSinceLastPoll ?? 0 })
        logger.info("Relaying \(configuration.topic) in group \(configuration.group) (dead letters to \(configuration.deadLetterTopic))")

        try await withThrowingDiscardingTaskGroup { consuming in
            consuming.addTask { try await consumer.run() }
            await withDiscardingTaskGroup { background in
                // The pipeline's deadlines: deferred vehicles, commits, forgetting idle vehicles.
                background.addTask { await self.driver.runDeadlines() }
                background.addTask { await self.tokens.runRefreshes() }
                await withTaskGroup(of: Bool.self) { work in
                    work.addTask { await self.driver.process(); return true }
                    await ingest(consumer)
                    await drain(consumer, work: &work)
                }
                drained.store(true, ordering: .relaxed)
                background.cancelAll()
            }
            // Leaving the group revokes every partition: its revoke commits what finished.
            driver.issueCommits(through: nil)
            driver.applyPauses(through: nil)
            await consumer.close()
        }
        logSummary()
    }

    /// Reads records until graceful shutdown and hands each chunk, decoded, to the pipeline in one step.
    /// Graceful shutdown cancels the whole loop, not only the wait for the next chunk: a chunk waiting
    /// out a registry outage stops waiting too, and stays unregistered (uncommitted).
    private func ingest(_ consumer: KafkaConsumer) async {
        await cancelWhenGracefulShutdown {
            for await chunk in consumer.records {
                self.health.recordRecordsConsumed()
                guard let records = try? await self.decoding.decode(chunk, waiting: self.driver.recordsWaitForSchemaRegistry)
                else { break }
                self.driver.consume(records)
            }
        }
    }

    /// The gauges computed from the relay's state rather than kept up to date by each event:
    /// the age of each partition's oldest unfinished record, paused partitions, the token
    /// cache's figures. Called before each scrape, so they are as of the scrape.
    public func refreshGauges() async {
        guard let consumer = consumerState.withLock({ $0 }) else { return }
        await gauges.refresh(consumer: consumer, pipeline: pipeline, tokens: tokens)
        gauges.recordResends(client.resentRequests)
    }

    /// Stops fetching and starting requests, and waits for the requests and dead-letter
    /// writes already under way (`work`'s processing task, which answers true when it
    /// ends), up to the shutdown timeout. Queued records stay uncommitted: the next owner
    /// of their partitions reads them again.
    private func drain(_ consumer: KafkaConsumer, work: inout TaskGroup<Bool>) async {
        logger.info("Shutting down: finishing in-flight work for up to \(configuration.shutdownTimeout)")
        driver.closeIntake()  // pauses every partition
        let timeout = configuration.shutdownTimeout
        work.addTask { (try? await Task.sleep(for: timeout)) == nil }
        if await work.next() == false {
            logger.warning("Shutdown timeout reached: abandoning unfinished work (it stays uncommitted)")
        }
        work.cancelAll()
    }

    private func logSummary() {
        let totals = statistics.snapshot
        logger.info("Stopped: consumed \(totals.consumed), accepted \(totals.accepted), superseded \(totals.superseded), stale \(totals.stale), dead-lettered \(totals.deadLettered), retries \(totals.retries)")
    }
}
