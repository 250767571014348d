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
/// letters, deadlines); `PipelineRun` reads, decodes and drains, as it does for a replay.
/// This type is the relay's configuration of them: the group's consumer as the record feed
/// and its commits as the sink. Rebalances: `RelayService+Rebalance.swift`; computed gauges:
/// `RelayGauges`.
public final class RelayService: Service, Sendable {
    public let configuration: RelayConfiguration
    public let statistics = RelayStatistics()
    public let health: RelayHealth
    private let tokens: TokenCache
    private let client: FleetEngineClient
    let logLimiter = LogLimiter()
    let pipelineRun: PipelineRun
    var driver: PipelineDriver { pipelineRun.driver }
    var pipeline: Pipeline { driver.pipeline }
    let logger: Logger
    let consumerState = Mutex<KafkaConsumer?>(nil)
    let gauges = RelayGauges()
    /// How long each revoke waited for the requests and dead-letter writes under way.
    let revokeWait = Timer(label: "fleet_relay_revoke_wait_seconds")

    /// `releaseFreedMemory` runs once each time a burst of unfinished records (a cold start, a
    /// backlog) has drained, on the thread that finished it.
    public init(configuration: RelayConfiguration, client: FleetEngineClient, tokens: TokenCache,
                logger: Logger, releaseFreedMemory: @escaping @Sendable () -> Void = {}) {
        self.configuration = configuration
        self.logger = logger
        self.tokens = tokens
        self.client = client
        self.health = RelayHealth(maximumOutage: configuration.readyMaximumOutage, logger: logger)
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
        let deadLetters = DeadLetterWriter(topic: configuration.deadLetterTopic,
                                           producerConfiguration: KafkaConfiguration(producerProperties),
                                           logLimiter: logLimiter, health: health, logger: logger)
        let forwarder = UpdateForwarder(client: client, tokens: tokens, statistics: statistics, health: health,
                                        logLimiter: logLimiter, logger: logger)
        let driver = PipelineDriver(limits: limits, forwarder: forwarder, deadLetters: deadLetters, statistics: statistics,
                                    health: health, logLimiter: logLimiter, logger: logger,
                                    maximumInFlight: configuration.maximumInFlight, releaseFreedMemory: releaseFreedMemory)
        let decoding = RecordDecoding(decoder: configuration.makeDecoder(), statistics: statistics, logLimiter: logLimiter, logger: logger)
        self.pipelineRun = PipelineRun(driver: driver, decoding: decoding, tokens: tokens, health: health,
                               shutdownTimeout: configuration.shutdownTimeout, logger: logger)
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
        health.watchPollLoop(secondsSinceLastPoll: { [weak consumer] in consumer?.secondsSinceLastPoll ?? 0 })
        logger.info("Relaying \(configuration.topic) in group \(configuration.group) (dead letters to \(configuration.deadLetterTopic))")
        // Leaving the group at the end revokes every partition: its revoke commits what finished.
        _ = try await pipelineRun.run(feed: consumer, commits: GroupCommits(consumer: consumer))
        logSummary()
    }

    /// The gauges computed from the relay's state rather than kept up to date by each event:
    /// the age of each partition's oldest unfinished record, paused partitions, the token
    /// cache's figures. Called before each scrape, so they are as of the scrape.
    public func refreshGauges() async {
        guard let consumer = consumerState.withLock({ $0 }) else { return }
        await gauges.refresh(consumer: consumer, pipeline: pipeline, tokens: tokens)
    }

    private func logSummary() {
        let totals = statistics.snapshot
        logger.info("Stopped: consumed \(totals.consumed), accepted \(totals.accepted), superseded \(totals.superseded), stale \(totals.stale), dead-lettered \(totals.deadLettered), retries \(totals.retries)")
    }
}
